//! `ddptop-handrolled`: the hand-rolled data-parallel loop as a ddptop worker. One process drives
//! k model replicas (one per GPU, or k on the CPU) and all-reduces their gradients by tensor
//! copies after the whole backward. Needs torch/lib on LD_LIBRARY_PATH at run time.

use clap::Parser;
use ddptop_handrolled::client::{Client, HelloInfo};
use ddptop_handrolled::data::{self, Data, DataKind};
use ddptop_handrolled::fault::{Fault, RankError};
use ddptop_handrolled::model::{self, ModelKind};
use ddptop_handrolled::reduce::Reduce;
use ddptop_handrolled::replica::{Dispatch, Group, panic_message};
use ddptop_handrolled::train::{self, Settings};
use serde_json::json;
use std::path::PathBuf;
use tch::Device;

#[derive(Parser, Debug)]
#[command(
    name = "ddptop-handrolled",
    version,
    about = "The hand-rolled data-parallel loop (one process, k replicas, gradient all-reduce by \
             tensor copies, no overlap) reporting to ddptop"
)]
struct Args {
    /// Replicas: one per GPU on CUDA, k on the CPU device otherwise.
    #[arg(long, default_value_t = 1)]
    k: usize,
    /// auto: cuda if torch sees a GPU, else cpu.
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "cuda"])]
    device: String,
    /// single: one thread issues every replica's work in turn; threads: one OS thread per replica.
    #[arg(long, default_value = "single", value_parser = Dispatch::parse)]
    dispatch: Dispatch,
    /// star: sum on device 0 and send back; ring: chunked reduce-scatter then all-gather.
    #[arg(long, default_value = "star", value_parser = Reduce::parse)]
    reduce: Reduce,
    #[arg(long, default_value = "resnet18", value_parser = ModelKind::parse)]
    model: ModelKind,
    /// Per-replica batch (weak scaling, like DDP's per-rank batch).
    #[arg(long, default_value_t = 256)]
    batch: i64,
    /// Epochs; epoch 0 is warm-up unless it is the only one.
    #[arg(long, default_value_t = 2)]
    epochs: i64,
    /// Samples per epoch, split across replicas.
    #[arg(long, default_value_t = 60000)]
    samples: i64,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Data and init seed.
    #[arg(long, default_value_t = 0)]
    seed: i64,
    /// auto: real if --data-dir has FashionMNIST's raw files, else synthetic.
    #[arg(long, default_value = "auto", value_parser = DataKind::parse)]
    data: DataKind,
    /// Folder with FashionMNIST raw files (default: $DDPTOP_DATASET_DIR).
    #[arg(long, env = "DDPTOP_DATASET_DIR")]
    data_dir: Option<PathBuf>,
    /// After warm-up, time and report every N-th step; the others run without draining the
    /// devices. `auto` (ddptop's default on GPUs) is 10 here: the Python workers pick N from
    /// the step time so that a slowed rank is named within 5 s, but this one process drives
    /// every replica, so no replica can straggle behind another process.
    #[arg(long, env = "DDPTOP_TIME_EVERY", default_value = "1", value_parser = time_every_arg)]
    time_every: u64,
    /// Send a buckets message every N steps.
    #[arg(long, default_value_t = 1)]
    buckets_every: u64,
}

/// `--time-every`: a whole number >= 1, or `auto` (1 in 10).
fn time_every_arg(raw: &str) -> Result<u64, String> {
    match raw.trim() {
        "auto" => Ok(10),
        n => match n.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "must be a whole number >= 1 or 'auto', not '{raw}'"
            )),
        },
    }
}

/// Ask Linux to SIGTERM this process when its parent (ddptop) dies: an extra orphan guard.
fn install_pdeathsig() {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory of ours.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() == 1 {
            libc::raise(libc::SIGTERM);
        }
    }
}

fn devices(args: &Args) -> anyhow::Result<Vec<Device>> {
    if args.k < 1 {
        anyhow::bail!("--k must be at least 1");
    }
    let cuda = match args.device.as_str() {
        "cpu" => false,
        "cuda" => true,
        _ => tch::Cuda::is_available(),
    };
    if !cuda {
        return Ok(vec![Device::Cpu; args.k]);
    }
    let have = tch::Cuda::device_count() as usize;
    if have == 0 {
        anyhow::bail!(
            "--device cuda but libtorch sees no GPU (is libtorch_cuda on LD_LIBRARY_PATH?); use --device cpu"
        );
    }
    if args.k > have {
        anyhow::bail!(
            "--k {} but libtorch sees only {have} GPU(s); use --k {have} or fewer",
            args.k
        );
    }
    Ok((0..args.k).map(Device::Cuda).collect())
}

fn device_name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

fn cuda_version() -> Option<String> {
    if !tch::Cuda::is_available() {
        return None;
    }
    let v = tch::utils::version_cudart();
    (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// Everything after the connection: set-up errors are reported to ddptop like training errors.
fn train(client: &Client, args: &Args, devs: &[Device]) -> anyhow::Result<i32> {
    if args.epochs < 1 || args.batch < 1 || args.samples < 1 {
        anyhow::bail!("--epochs, --batch and --samples must be >= 1");
    }
    let fault = Fault::from_env().map_err(anyhow::Error::msg)?;
    // The book's settings, where tch offers them: cudnn.benchmark (set before the first
    // convolution, so its autotuning covers every shape). tch 0.24 has no setter for the float32
    // matmul precision, so libtorch's default ("highest") stays; in the d2l ResNet-18 only the
    // final Linear layer is a matmul (the convolutions go to cuDNN, TF32 by libtorch's default).
    tch::Cuda::cudnn_set_benchmark(true);
    client.log(
        0,
        "info",
        "settings: cudnn.benchmark on (the book's); matmul precision highest (libtorch's \
         default: tch 0.24 cannot set the book's \"high\")",
    );
    let (images, labels, desc) =
        data::source(args.data, args.data_dir.as_deref(), args.samples, args.seed)?;
    let data = Data::build(&images, &labels, desc, devs, args.batch, args.seed)?;
    drop((images, labels));
    let mut group = Group::new(
        args.model,
        devs,
        args.seed,
        args.lr,
        args.dispatch,
        args.reduce,
    )?;
    let k = devs.len();
    let params = model::count_params(&group.replicas[0].vs);
    client.log(
        0,
        "info",
        &format!(
            "hand-rolled loop: k={k} replicas on {}, dispatch {}, reduce {}, per-replica batch {} \
             (global {}), {} steps/epoch, data {}, model {} ({params} params), timing host \
             (devices synchronized at each phase boundary of a timed step; steps timed 1 in {} \
             after warm-up), no overlap",
            devs.iter()
                .map(|d| device_name(*d))
                .collect::<Vec<_>>()
                .join(","),
            args.dispatch.as_str(),
            args.reduce.as_str(),
            args.batch,
            args.batch * k as i64,
            data.steps_per_epoch,
            data.description,
            args.model.as_str(),
            args.time_every,
        ),
    );
    let settings = Settings {
        epochs: args.epochs,
        buckets_every: args.buckets_every,
        time_every: args.time_every,
        bn_train: true,
        fault,
    };
    let out = train::run(client, &mut group, &data, &settings)?;
    let mean =
        (!out.timed.is_empty()).then(|| out.timed.iter().sum::<f64>() / out.timed.len() as f64);
    let gb = train::grad_bytes(&group);
    client.send_all(
        "result",
        json!({"experiment": "handrolled", "samples_per_s": mean, "timed_epochs": out.timed.len(),
               "params": params, "grad_bytes": gb, "bucket_bytes": [gb], "optimizer": "sgd",
               // What was set above: tch can set cudnn.benchmark but read neither back, and
               // nothing in this process changes the matmul precision from libtorch's default.
               "matmul_precision": "highest", "cudnn_benchmark": true}),
    );
    let rate = mean.map_or("n/a".into(), |m| format!("{:.1}", m * k as f64));
    println!(
        "handrolled k={k} {}+{}: {rate} samples/s over {} timed epoch(s), per-replica batch {}",
        args.dispatch.as_str(),
        args.reduce.as_str(),
        out.timed.len(),
        args.batch
    );
    client.close(if out.stopped { "stopped" } else { "done" });
    Ok(0)
}

fn main() {
    install_pdeathsig();
    let args = Args::parse();
    // libtorch errors surface as panics in tch; they are caught and reported in one line.
    std::panic::set_hook(Box::new(|_| {}));
    let devs = match devices(&args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ddptop-handrolled: error: {e}");
            std::process::exit(1);
        }
    };
    let info = HelloInfo {
        world_size: devs.len(),
        // No collective library: the all-reduce is tensor copies (protocol backend `copy`).
        backend: "copy",
        torch: Some(env!("DDPTOP_TORCH_VERSION").to_string()).filter(|v| !v.is_empty()),
        cuda: cuda_version(),
        devices: devs.iter().map(|d| device_name(*d)).collect(),
    };
    // torchrun gives each of k > 1 DDP workers one intra-op thread (OMP_NUM_THREADS=1) unless
    // the user set it, and leaves a single worker torch's default; the CPU replicas here get the
    // same, so at k > 1 k replica threads use k cores like k DDP ranks do.
    if !devs[0].is_cuda() && devs.len() > 1 && std::env::var_os("OMP_NUM_THREADS").is_none() {
        tch::set_num_threads(1);
    }
    let client = match Client::from_env(&info) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ddptop-handrolled: error: {e:#}");
            std::process::exit(1);
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train(&client, &args, &devs)
    }))
    .unwrap_or_else(|p| Err(panic_message(p)));
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let (rank, msg) = match e.downcast_ref::<RankError>() {
                Some(re) => (re.rank, re.msg.clone()),
                None => (0, format!("{e:#}")),
            };
            client.log(rank, "error", &msg);
            client.close("error");
            eprintln!("ddptop-handrolled (rank {rank}): error: {msg}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::time_every_arg;

    #[test]
    fn time_every_is_a_whole_number_or_auto() {
        assert_eq!(time_every_arg("auto"), Ok(10));
        assert_eq!(time_every_arg("3"), Ok(3));
        for bad in ["0", "", "ten", "-1"] {
            assert!(time_every_arg(bad).unwrap_err().contains("'auto'"), "{bad}");
        }
    }
}
