//! The run model at the bottom of the tree: what a run is (`RunSpec`, `Experiment`, its NCCL
//! settings), which curve it belongs to (`CurveKey`), what it reported (`RunView`). Imported by
//! the supervisor, the store, `app`, `ui` and both front ends; it imports only `protocol`.

pub mod checks;
pub mod coll_bounds;
pub mod collectives;
pub mod curve;
pub mod ddp;
pub mod family;
pub mod fault;
pub mod handrolled;
pub mod nccl;
pub mod run_spec;
pub mod spec;
pub mod view;

pub use curve::{Batch, CurveKey, Setting, Warmup};
pub use ddp::{BucketCapMb, DdpSettings};
pub use family::{
    Experiment, Family, FamilyArgs, FamilyKind, ScalingCurves, SimWorker, StoredColumns, Worker,
    WorkerInput,
};
pub use fault::Fault;
pub use handrolled::{HandDispatch, HandReduce, HandRolled};
pub use nccl::{EnvOverlay, NcclMode, NcclSettings, NcclVar};
pub use run_spec::RunSpec;
pub use spec::{
    AttachTarget, DEFAULT_PROFILE, DataPath, DataSource, HostBackend, JaxSharding, ModelName,
    OptimizerName, RunStatus, SIM_MODEL_ONLY, TorchSettings, TorchStrategy, fits,
};
pub use view::{
    Aggregate, Caveat, CommTotals, Diagnosis, DiagnosisKind, MAX_BUCKET_HISTORY, MAX_LOG_TAIL,
    MAX_MEMORY_PHASES, Observed, OpTotal, RankTail, RankView, RunView, Scaling, Settings,
};
