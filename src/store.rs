//! The run database: SQLite (bundled), WAL, in the data directory.
//!
//! Every run's spec, exact command and environment, versions, status and timestamps; per-rank
//! and aggregate results with their spread; and the events needed to redraw it. Writes are
//! synchronous and small; a run's final figures are committed before anything reports them.

use crate::protocol::{Backend, Bench, Buckets, Probe, WorkerMsg};
use crate::run::{self, Family, TorchSettings};
use crate::run::{
    Aggregate, DataPath, DataSource, Experiment, ModelName, NcclSettings, RankView, RunSpec,
    RunStatus, RunView, Scaling,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};

mod archive;
pub use archive::{FILE as ARCHIVE_FILE, StepArchive, WHAT as ARCHIVE_WHAT};

pub struct Store {
    conn: Connection,
    pub path: PathBuf,
    archive: StepArchive,
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    k INTEGER NOT NULL,
    backend TEXT NOT NULL,
    profile TEXT,
    model TEXT NOT NULL,
    batch INTEGER NOT NULL,
    per_rank_batch INTEGER NOT NULL,
    global_batch INTEGER NOT NULL,
    epochs INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    toggles_json TEXT NOT NULL,
    inject TEXT,
    control INTEGER NOT NULL DEFAULT 0,
    sweep TEXT,
    command TEXT NOT NULL,
    argv_json TEXT NOT NULL,
    environ_json TEXT NOT NULL,
    versions_json TEXT NOT NULL DEFAULT '{}',
    ddptop_version TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    started_unix REAL NOT NULL,
    ended_unix REAL,
    samples_per_s REAL,
    rank_min REAL,
    rank_max REAL,
    speedup REAL,
    efficiency REAL,
    transport TEXT,
    run_dir TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    pids_json TEXT NOT NULL DEFAULT '[]',
    bad_lines INTEGER NOT NULL DEFAULT 0,
    rejected INTEGER NOT NULL DEFAULT 0,
    hang_report_json TEXT NOT NULL DEFAULT '[]',
    grad_bytes INTEGER,
    bucket_bytes_json TEXT NOT NULL DEFAULT '[]',
    data_path TEXT NOT NULL DEFAULT 'device',
    data_source TEXT NOT NULL DEFAULT 'synthetic',
    baseline_run TEXT,
    sharding TEXT NOT NULL DEFAULT 'data',
    strategy TEXT NOT NULL DEFAULT 'fsdp',
    optimizer TEXT NOT NULL DEFAULT 'sgd',
    attach_json TEXT,
    hand TEXT NOT NULL DEFAULT 'single+star',
    family_json TEXT,
    torch_settings TEXT NOT NULL DEFAULT 'off',
    gpus_shared TEXT,
    nccl_read_json TEXT NOT NULL DEFAULT '{}',
    caveats_json TEXT NOT NULL DEFAULT '[]',
    observed_json TEXT,
    comm_timing TEXT,
    collectives_json TEXT,
    instrument TEXT,
    rank_tails_json TEXT NOT NULL DEFAULT '[]',
    diagnoses_json TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS rank_results (
    run_id TEXT NOT NULL REFERENCES runs(id),
    rank INTEGER NOT NULL,
    samples_per_s REAL,
    epochs_json TEXT NOT NULL,
    pid INTEGER,
    device TEXT,
    bad_lines INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, rank)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    unix REAL NOT NULL,
    rank INTEGER,
    type TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, type);
"#;

/// An event row waiting to be written.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub run_id: String,
    pub unix: f64,
    pub rank: Option<u32>,
    pub kind: String,
    pub body: String,
}

impl EventRow {
    pub fn from_msg(run_id: &str, msg: &WorkerMsg) -> Option<EventRow> {
        // Heartbeats carry nothing to redraw; the NCCL profiler's batches (several a second per
        // rank) are live only (docs/profiler.md); everything else is kept.
        if matches!(msg, WorkerMsg::Heartbeat(_) | WorkerMsg::Nccl(_)) {
            return None;
        }
        let mut body = serde_json::to_value(msg).ok()?;
        // The token authenticates a live run over TCP: whoever reads the database must not be
        // able to join one with it.
        if let Some(o) = body.as_object_mut() {
            o.remove("token");
        }
        Some(EventRow {
            run_id: run_id.to_string(),
            unix: crate::util::unix_now(),
            rank: Some(msg.rank()),
            kind: msg.type_name().to_string(),
            body: body.to_string(),
        })
    }

    /// A message as the line it came in (validated, `v` and any keys ddptop does not know
    /// kept as sent: the line was at most 1 MiB and every known field passed its range check;
    /// readers ignore the unknown keys). A `hello` is re-serialized without its token.
    pub fn from_line(run_id: &str, msg: &WorkerMsg, line: String) -> Option<EventRow> {
        match msg {
            WorkerMsg::Heartbeat(_) => None,
            WorkerMsg::Hello(_) => EventRow::from_msg(run_id, msg),
            _ => Some(EventRow {
                run_id: run_id.to_string(),
                unix: crate::util::unix_now(),
                rank: Some(msg.rank()),
                kind: msg.type_name().to_string(),
                body: line,
            }),
        }
    }

    /// A rank named as a straggler, as it was when named (`load_details` reads it back).
    pub fn straggler(run_id: &str, s: &crate::run::view::Straggler) -> EventRow {
        EventRow {
            run_id: run_id.to_string(),
            unix: crate::util::unix_now(),
            rank: Some(s.rank),
            kind: "straggler".into(),
            body: serde_json::to_string(s).unwrap_or_default(),
        }
    }

    /// One of ddptop's own messages about a run (hang verdict, rejection, …).
    pub fn note(run_id: &str, text: &str) -> EventRow {
        EventRow {
            run_id: run_id.to_string(),
            unix: crate::util::unix_now(),
            rank: None,
            kind: "ddptop".into(),
            body: serde_json::json!({ "msg": text }).to_string(),
        }
    }
}

/// The row type under which an earlier ddptop packed `kind` messages (`step_pack`,
/// `buckets_pack`: a JSON array of lines per flush); counted, never written now.
fn pack_kind(kind: &str) -> String {
    format!("{kind}_pack")
}

/// What is written when a run starts.
pub struct NewRun<'a> {
    pub id: &'a str,
    pub spec: &'a RunSpec,
    pub sweep: Option<&'a str>,
    pub command: &'a crate::supervisor::launch::CommandLine,
    pub started_unix: f64,
    pub run_dir: &'a Path,
}

/// Columns added after the first schema: added to databases that lack them.
fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let has = |col: &str| -> rusqlite::Result<bool> {
        let mut stmt = conn.prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = ?1")?;
        stmt.exists([col])
    };
    for (col, decl) in [
        ("data_path", "TEXT NOT NULL DEFAULT 'device'"),
        ("data_source", "TEXT NOT NULL DEFAULT 'synthetic'"),
        ("baseline_run", "TEXT"),
        ("sharding", "TEXT NOT NULL DEFAULT 'data'"),
        ("strategy", "TEXT NOT NULL DEFAULT 'fsdp'"),
        ("optimizer", "TEXT NOT NULL DEFAULT 'sgd'"),
        ("attach_json", "TEXT"),
        ("hand", "TEXT NOT NULL DEFAULT 'single+star'"),
        ("gpus_shared", "TEXT"),
        ("nccl_read_json", "TEXT NOT NULL DEFAULT '{}'"),
        // Runs stored before ddptop applied the book's settings ran without them: 'off'.
        ("torch_settings", "TEXT NOT NULL DEFAULT 'off'"),
        ("caveats_json", "TEXT NOT NULL DEFAULT '[]'"),
        ("observed_json", "TEXT"),
        // The family and its own settings as one JSON object (`run::Family`); rows without
        // it are read from the per-family columns above (`family`).
        ("family_json", "TEXT"),
        // NCCL's profiler plugin (docs/profiler.md): older runs had none stored.
        ("comm_timing", "TEXT"),
        ("collectives_json", "TEXT"),
        // How much an attached script was measured (`show`'s "measured" line needs it).
        ("instrument", "TEXT"),
        // Failed ranks' own last output lines (`supervisor::output::rank_tails`).
        ("rank_tails_json", "TEXT NOT NULL DEFAULT '[]'"),
        // Failures named with their fix (`app::diagnose`).
        ("diagnoses_json", "TEXT NOT NULL DEFAULT '[]'"),
    ] {
        if !has(col)? {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {col} {decl}"))?;
        }
    }
    // user_version 1: `loader` became the book's torchvision pipeline (issue 48); a run stored
    // before ran ddptop's faster loader, which is `fast-loader` now. Once per database.
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version < 1 {
        conn.execute_batch(
            "BEGIN;
             UPDATE runs SET data_path = 'fast-loader' WHERE data_path = 'loader';
             PRAGMA user_version = 1;
             COMMIT;",
        )?;
    }
    Ok(())
}

/// The data directory holds every run's command, environment and output: 0700 when it is
/// created, and closed to 0700 when an older ddptop left it open (only when it is ours).
fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    crate::paths::not_planted(dir).map_err(anyhow::Error::msg)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow::anyhow!("cannot create the data directory {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(dir)?;
    if meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The database and its WAL files at 0600 (SQLite gives new WAL files the database's mode).
fn private_db_files(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot open the run database {}: {e}", path.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(m) = std::fs::symlink_metadata(&p)
            && m.is_file()
            && m.uid() == me
            && m.mode() & 0o077 != 0
        {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

impl Store {
    /// Open (creating) the database. Runs left `running` by a ddptop that is no longer alive
    /// are marked failed, so history never shows a ghost run as in progress.
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_data_dir(dir)?;
        }
        private_db_files(path)?;
        let conn = Connection::open(path)
            .map_err(|e| anyhow::anyhow!("cannot open the run database {}: {e}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        let runs_dir = crate::paths::runs_dir(path.parent().unwrap_or(Path::new(".")));
        let store = Store {
            conn,
            path: path.to_path_buf(),
            archive: StepArchive::new(runs_dir),
        };
        store.mark_orphaned_runs()?;
        Ok(store)
    }

    fn mark_orphaned_runs(&self) -> anyhow::Result<()> {
        let mut stmt = self.conn.prepare(
            "SELECT id, owner_pid FROM runs WHERE status IN ('starting','running','stalled')",
        )?;
        let rows: Vec<(String, u32)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (id, owner) in rows {
            if owner != std::process::id() && !crate::supervisor::procs::alive(owner) {
                self.conn.execute(
                    "UPDATE runs SET status='failed', reason=?2, ended_unix=COALESCE(ended_unix, ?3) WHERE id=?1",
                    params![id, format!("ddptop (pid {owner}) ended before this run finished"), crate::util::unix_now()],
                )?;
            }
        }
        Ok(())
    }

    pub fn insert_run(&self, r: &NewRun) -> anyhow::Result<()> {
        let s = r.spec;
        let mut environ = r.command.env.clone();
        // The token authenticates a live run only; never keep it.
        if let Some(v) = environ.get_mut("DDPTOP_TOKEN") {
            *v = Some("<redacted>".into());
        }
        self.conn.execute(
            "INSERT INTO runs (id, experiment, k, backend, profile, model, batch, per_rank_batch, global_batch,
              epochs, samples, toggles_json, inject, control, sweep, command, argv_json, environ_json,
              ddptop_version, status, started_unix, run_dir, owner_pid, data_path, data_source,
              family_json)
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,'starting',?20,?21,?22,?23,?24,?25)",
            params![
                r.id,
                s.experiment().as_str(),
                s.k,
                s.backend.as_str(),
                s.profile,
                s.model.as_str(),
                s.batch,
                s.per_rank_batch(),
                s.global_batch(),
                s.epochs,
                s.samples as i64,
                serde_json::to_string(s.nccl.as_map())?,
                s.inject.as_ref().map(|f| f.to_string()),
                s.control,
                r.sweep,
                r.command.shell(),
                serde_json::to_string(&r.command.argv)?,
                serde_json::to_string(&environ)?,
                env!("CARGO_PKG_VERSION"),
                r.started_unix,
                r.run_dir.display().to_string(),
                std::process::id(),
                s.data_path.as_str(),
                s.data_source.to_stored(),
                serde_json::to_string(&s.family)?,
            ],
        )?;
        if s.torch != TorchSettings::Off {
            self.conn.execute(
                "UPDATE runs SET torch_settings = ?2 WHERE id = ?1",
                params![r.id, s.torch.as_str()],
            )?;
        }
        Ok(())
    }

    pub fn set_running(
        &self,
        id: &str,
        pids: &[u32],
        versions: &std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<()> {
        self.conn.execute(
            "UPDATE runs SET status = CASE WHEN status='starting' THEN 'running' ELSE status END, pids_json=?2, versions_json=?3 WHERE id=?1",
            params![id, serde_json::to_string(pids)?, serde_json::to_string(versions)?],
        )?;
        Ok(())
    }

    /// A live run's status and hang evidence as they change (an attached job that stalls and
    /// resumes), so that `ddptop show` in another process sees the stall while it lasts, not
    /// only once the run is finalized. A run already final in the store is left alone.
    pub fn set_live(&self, run: &RunView) -> anyhow::Result<()> {
        self.conn.execute(
            "UPDATE runs SET status=?2, hang_report_json=?3, diagnoses_json=?4
             WHERE id=?1 AND status IN ('starting', 'running', 'stalled')",
            params![
                run.id,
                run.status.as_str(),
                serde_json::to_string(&run.evidence.hang_report)?,
                serde_json::to_string(&run.evidence.diagnoses)?
            ],
        )?;
        Ok(())
    }

    /// Write a batch of events in one transaction (the per-step lines go to the archive,
    /// [`StepArchive`], not here).
    pub fn add_events(&mut self, rows: &[EventRow]) -> anyhow::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO events (run_id, unix, rank, type, body) VALUES (?1,?2,?3,?4,?5)",
            )?;
            for e in rows {
                stmt.execute(params![e.run_id, e.unix, e.rank, e.kind, e.body])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The archive of the runs' per-step lines (`runs/<id>/steps.jsonl` beside the database).
    pub fn archive(&mut self) -> &mut StepArchive {
        &mut self.archive
    }

    /// How many `kind` messages of `run` are stored. `step` and `buckets`: the lines of the
    /// run's archive when it has one (every one of them is there); otherwise, for runs stored
    /// before the archive, rows of their own and the packs an earlier ddptop wrote.
    pub fn stored_messages(&self, run: &str, kind: &str) -> anyhow::Result<u64> {
        if matches!(kind, "step" | "buckets")
            && let Some(n) = self.archive.count(run, kind)?
        {
            return Ok(n);
        }
        let n: i64 = self.conn.query_row(
            "SELECT (SELECT COUNT(*) FROM events WHERE run_id=?1 AND type=?2)
                  + (SELECT COALESCE(SUM(json_array_length(body)), 0) FROM events
                     WHERE run_id=?1 AND type=?3)",
            params![run, kind, pack_kind(kind)],
            |r| r.get(0),
        )?;
        Ok(n as u64)
    }

    /// Commit a run's final status and figures in one transaction.
    pub fn finalize(&mut self, run: &RunView, scaling: Option<&Scaling>) -> anyhow::Result<()> {
        let tx = self.conn.transaction()?;
        let agg = run.figures.aggregate.as_ref();
        let pids: Vec<u32> = run.ranks.values().filter_map(|r| r.pid).collect();
        tx.execute(
            "UPDATE runs SET status=?2, reason=?3, ended_unix=?4, samples_per_s=?5, rank_min=?6, rank_max=?7,
              speedup=?8, efficiency=?9, transport=?10, pids_json=?11, bad_lines=?12, rejected=?13,
              hang_report_json=?14, grad_bytes=?15, bucket_bytes_json=?16, versions_json=?17,
              baseline_run=?18, gpus_shared=?19, nccl_read_json=?20, caveats_json=?21,
              observed_json=?22, comm_timing=?23, collectives_json=?24,
              instrument=?25, rank_tails_json=?26, diagnoses_json=?27 WHERE id=?1",
            params![
                run.id,
                run.status.as_str(),
                run.reason,
                run.clock.ended_unix,
                agg.map(|a| a.samples_per_s),
                agg.map(|a| a.rank_min),
                agg.map(|a| a.rank_max),
                scaling.map(|s| s.speedup),
                scaling.map(|s| s.efficiency),
                run.transport(),
                serde_json::to_string(&pids)?,
                run.bad_lines() as i64,
                run.evidence.rejected as i64,
                serde_json::to_string(&run.evidence.hang_report)?,
                run.figures.grad_bytes.map(|b| b as i64),
                serde_json::to_string(&run.figures.bucket_bytes)?,
                serde_json::to_string(&run.launch.versions)?,
                scaling.map(|s| s.baseline.as_str()),
                run.launch.gpus_shared,
                serde_json::to_string(&run.launch.nccl_read)?,
                serde_json::to_string(&run.evidence.caveats)?,
                // Only an attached run has observed settings (the others' are their spec's).
                run.spec.kind().runs_user_script()
                    .then(|| serde_json::to_string(&run.seen.observed))
                    .transpose()?,
                run.seen.comm_timing.map(|c| c.as_str()),
                run.figures.coll_summary
                    .as_ref()
                    .map(serde_json::to_string)
                    .transpose()?,
                run.seen.instrument
                    .map(|i| serde_json::to_value(i).map(|v| v.as_str().unwrap_or("").to_string()))
                    .transpose()?,
                serde_json::to_string(&run.evidence.rank_tails)?,
                serde_json::to_string(&run.evidence.diagnoses)?,
            ],
        )?;
        // The per-phase table as of the end (issue 46): the phase history it is read from is
        // not stored. One row; `load_details` reads the newest.
        if !run.straggler.phase_scores.is_empty() {
            tx.execute(
                "INSERT INTO events (run_id, unix, rank, type, body) VALUES (?1,?2,NULL,'phase_scores',?3)",
                params![
                    run.id,
                    run.clock.ended_unix.unwrap_or_else(crate::util::unix_now),
                    serde_json::to_string(&run.straggler.phase_scores)?
                ],
            )?;
        }
        for r in run.ranks.values() {
            tx.execute(
                "INSERT OR REPLACE INTO rank_results (run_id, rank, samples_per_s, epochs_json, pid, device, bad_lines)
                 VALUES (?1,?2,?3,?4,?5,?6,?7)",
                params![
                    run.id,
                    r.rank,
                    r.result_sps,
                    serde_json::to_string(&r.epochs)?,
                    r.pid,
                    r.device,
                    r.bad_lines as i64
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn status_of(&self, id: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT status FROM runs WHERE id=?1", [id], |r| r.get(0))
            .optional()?)
    }

    /// The most recent runs, newest first, rebuilt far enough to redraw them. A value ddptop
    /// does not know (a backend, an experiment: a newer ddptop wrote it) is an error naming the
    /// run, never a silent default.
    pub fn load_runs(&self, limit: usize) -> anyhow::Result<Vec<RunView>> {
        let mut stmt = self
            .conn
            .prepare("SELECT * FROM runs ORDER BY started_unix DESC LIMIT ?1")?;
        let rows = stmt.query_map([limit as i64], |r| Ok(run_from_row(r)))?;
        let mut runs: Vec<RunView> = Vec::new();
        for row in rows {
            runs.push(row??);
        }
        for run in &mut runs {
            self.load_details(run)?;
        }
        Ok(runs)
    }

    fn load_details(&self, run: &mut RunView) -> anyhow::Result<()> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT rank, samples_per_s, epochs_json, pid, device FROM rank_results WHERE run_id=?1 ORDER BY rank")?;
        let ranks = stmt.query_map([&run.id], |r| {
            Ok(RankView {
                rank: r.get(0)?,
                result_sps: r.get::<_, Option<f64>>(1)?.and_then(rate),
                epochs: serde_json::from_str::<Vec<(u32, f64, bool)>>(&r.get::<_, String>(2)?)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, sps, _)| rate(*sps).is_some())
                    .collect(),
                pid: r.get(3)?,
                device: r.get(4)?,
                ..Default::default()
            })
        })?;
        for rv in ranks {
            let rv = rv?;
            run.ranks.insert(rv.rank, rv);
        }
        if let Some(a) = run.figures.aggregate.as_mut() {
            a.per_rank = run.ranks.values().filter_map(|r| r.result_sps).collect();
        }
        // Probe blocks and bench rows in full; of the per-step timelines only each rank's last,
        // and the last log lines: enough to redraw, cheap with hundreds of stored runs.
        let mut stmt = self.conn.prepare_cached(
            "SELECT type, body FROM events WHERE run_id=?1 AND (
                 type IN ('probe','bench','hlo','check','result','straggler','node_gpus',
                          'phase_scores')
                 OR seq IN (SELECT MAX(seq) FROM events WHERE run_id=?1 AND type IN ('buckets','comm')
                            GROUP BY rank, type)
                 OR (type='memory' AND ?2)
                 OR seq IN (SELECT seq FROM events WHERE run_id=?1 AND type IN ('log','ddptop')
                            ORDER BY seq DESC LIMIT 200))
             ORDER BY seq",
        )?;
        // Every memory report of an fsdp run (a handful of phases); others send one every 50 steps.
        // A JAX run's too: a few per device.
        let memory = run.spec.kind().keeps_every_memory_report();
        let rows = stmt.query_map(params![&run.id, memory], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (kind, body) = row?;
            match kind.as_str() {
                // The log line that named it is a `ddptop` note of its own.
                "straggler" => {
                    if let Ok(s) = serde_json::from_str::<crate::run::view::Straggler>(&body) {
                        run.straggler.named.push(s);
                    }
                }
                "phase_scores" => {
                    if let Ok(rows) = serde_json::from_str(&body) {
                        run.straggler.phase_scores = rows;
                    }
                }
                "node_gpus" => {
                    if let Ok(rows) = serde_json::from_str(&body) {
                        run.figures.node_gpus = rows;
                    }
                }
                "ddptop" => {
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    if let Some(m) = v["msg"].as_str() {
                        run.push_tail(format!("ddptop: {m}"));
                    }
                }
                // Stored before the protocol's range checks (or written by anything else):
                // checked again, so one absurd figure cannot hang a report.
                _ => match serde_json::from_str::<WorkerMsg>(&body)
                    .map_err(|_| ())
                    .and_then(|m| {
                        crate::protocol::validate::check_numbers(&m)
                            .map(|()| m)
                            .map_err(|_| ())
                    }) {
                    Ok(WorkerMsg::Probe(p)) => run.figures.probe.push(p as Probe),
                    Ok(WorkerMsg::Result(r)) => run.note_torch_seen(&r),
                    Ok(WorkerMsg::Bench(b)) => run.figures.bench.push(b as Bench),
                    Ok(WorkerMsg::Buckets(b)) => {
                        if let Some(rv) = run.ranks.get_mut(&b.rank) {
                            rv.buckets = Some(b as Buckets);
                        }
                    }
                    Ok(WorkerMsg::Comm(c)) => {
                        if let Some(rv) = run.ranks.get_mut(&c.rank) {
                            rv.comm = Some(c);
                        }
                    }
                    Ok(WorkerMsg::Memory(m)) => {
                        if let Some(d) = m.device {
                            run.figures.device_memory.insert(d, m.clone());
                        }
                        if let Some(rv) = run.ranks.get_mut(&m.rank) {
                            rv.record_memory(&m);
                        }
                    }
                    Ok(WorkerMsg::Hlo(h)) => run.figures.hlo = Some(h),
                    Ok(WorkerMsg::Check(c)) => run.figures.checks.push(c),
                    Ok(WorkerMsg::Log(l)) => {
                        run.push_tail(format!("[rank {}] {:?}: {}", l.rank, l.level, l.msg))
                    }
                    _ => {}
                },
            }
        }
        self.load_bucket_history(run)
    }

    /// Rank 0's last `STORED_TIMELINES` timelines (the timeline's median window and the cost
    /// model's k=1 ready times read them); the other ranks keep only their latest.
    fn load_bucket_history(&self, run: &mut RunView) -> anyhow::Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT body FROM events WHERE run_id=?1 AND type='buckets' AND rank=0
             ORDER BY seq DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(rusqlite::params![&run.id, STORED_TIMELINES], |r| {
            r.get::<_, String>(0)
        })?;
        let mut hist = Vec::new();
        for body in rows {
            if let Ok(WorkerMsg::Buckets(b)) = serde_json::from_str::<WorkerMsg>(&body?) {
                hist.push(b);
            }
        }
        if let Some(rv) = run.ranks.get_mut(&0) {
            rv.recent_buckets = hist.into_iter().rev().collect();
        }
        Ok(())
    }
}

/// A stored samples/s figure when it is plausible (`protocol::validate::limits`); databases
/// written before the protocol bounded numbers can hold 1e308.
fn rate(x: f64) -> Option<f64> {
    crate::protocol::validate::plausible(x, crate::protocol::validate::limits::SAMPLES_PER_S)
}

/// A stored speedup or efficiency when it is plausible (k is far below a million).
fn ratio(x: f64) -> Option<f64> {
    crate::protocol::validate::plausible(x, 1e6)
}

fn spec_id(r: &rusqlite::Row) -> String {
    r.get("id").unwrap_or_default()
}

/// What a run was launched with and what was committed when it ended, beyond its `RunView`:
/// for reports, `ddptop show` and `ddptop diff`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchRecord {
    /// The exact command line, shell-quoted.
    pub command: String,
    pub run_dir: PathBuf,
    pub ddptop_version: String,
    /// The environment the launch was given (the token redacted); `None`: unset.
    pub environ: std::collections::BTreeMap<String, Option<String>>,
    /// Speedup and efficiency as committed at the end of the run, with the k=1 run divided by.
    pub scaling: Option<Scaling>,
}

impl Store {
    pub fn launch_record(&self, id: &str) -> anyhow::Result<Option<LaunchRecord>> {
        Ok(self
            .conn
            .query_row(
                "SELECT command, run_dir, ddptop_version, environ_json, speedup, efficiency, baseline_run
                 FROM runs WHERE id=?1",
                [id],
                |r| {
                    let speedup: Option<f64> = r.get::<_, Option<f64>>(4)?.and_then(ratio);
                    let efficiency: Option<f64> = r.get::<_, Option<f64>>(5)?.and_then(ratio);
                    let baseline: Option<String> = r.get(6)?;
                    Ok(LaunchRecord {
                        command: r.get(0)?,
                        run_dir: PathBuf::from(r.get::<_, String>(1)?),
                        ddptop_version: r.get(2)?,
                        environ: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                        scaling: match (speedup, efficiency, baseline) {
                            (Some(speedup), Some(efficiency), Some(baseline)) => Some(Scaling {
                                speedup,
                                efficiency,
                                baseline,
                            }),
                            _ => None,
                        },
                    })
                },
            )
            .optional()?)
    }
}

/// Timelines of rank 0 reloaded per stored run (the dashboard's default median window).
const STORED_TIMELINES: i64 = 50;

/// A column that must name one of ddptop's values.
fn known<T>(r: &rusqlite::Row, col: &str, parse: impl Fn(&str) -> Option<T>) -> anyhow::Result<T> {
    run::family::known_column(&Columns(r), col, parse)
}

fn json_col<T: serde::de::DeserializeOwned + Default>(
    r: &rusqlite::Row,
    col: &str,
) -> anyhow::Result<T> {
    let text: String = r.get(col)?;
    Ok(serde_json::from_str(&text).unwrap_or_default())
}

/// The run's family: its `family_json` (one JSON object: the experiment and its own settings),
/// or, for a row stored before that column, the experiment and the per-family columns it had
/// (`sharding`, `strategy`, `optimizer`, `hand`, `attach_json`). Unreadable values are errors
/// naming the run, never defaults.
fn family(r: &rusqlite::Row, experiment: Experiment) -> anyhow::Result<Family> {
    if let Some(text) = r.get::<_, Option<String>>("family_json")? {
        let f: Family = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "run {} in the database has an unreadable family_json: {e}",
                spec_id(r)
            )
        })?;
        if f.experiment() != experiment {
            anyhow::bail!(
                "run {} in the database is a {} run with a {} family_json",
                spec_id(r),
                experiment,
                f.experiment()
            );
        }
        return Ok(f);
    }
    experiment.kind().read_columns(&Columns(r))
}

/// A stored row's columns as the family files read them (`run::StoredColumns`).
struct Columns<'a, 'b>(&'a rusqlite::Row<'b>);

impl run::StoredColumns for Columns<'_, '_> {
    fn text(&self, col: &str) -> anyhow::Result<Option<String>> {
        Ok(self.0.get(col)?)
    }
    fn value(&self, col: &str) -> anyhow::Result<String> {
        Ok(self.0.get(col)?)
    }
    fn unknown(&self, col: &str, value: &str) -> anyhow::Error {
        let id: String = self.0.get("id").unwrap_or_default();
        anyhow::anyhow!(
            "run {id} in the database has {col} `{value}`, which this ddptop does not know (written by a newer version?)"
        )
    }
    fn unreadable(&self, col: &str, why: &dyn std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!(
            "run {} in the database has an unreadable {col}: {why}",
            spec_id(self.0)
        )
    }
}

fn run_from_row(r: &rusqlite::Row) -> anyhow::Result<RunView> {
    let experiment = known(r, "experiment", |s| s.parse::<Experiment>().ok())?;
    let spec = RunSpec {
        family: family(r, experiment)?,
        k: r.get("k")?,
        backend: known(r, "backend", |s| s.parse::<Backend>().ok())?,
        profile: r.get("profile")?,
        model: known(r, "model", |s| s.parse::<ModelName>().ok())?,
        batch: r.get("batch")?,
        epochs: r.get("epochs")?,
        samples: r.get::<_, i64>("samples")? as u64,
        nccl: NcclSettings::from_stored(json_col(r, "toggles_json")?),
        inject: match r.get::<_, Option<String>>("inject")? {
            Some(_) => Some(known(r, "inject", |s| s.parse().ok())?),
            None => None,
        },
        control: r.get("control")?,
        data_path: known(r, "data_path", |s| s.parse::<DataPath>().ok())?,
        data_source: known(r, "data_source", DataSource::from_stored)?,
        torch: known(r, "torch_settings", |s| s.parse::<TorchSettings>().ok())?,
    };
    let mut run = RunView::new(
        r.get("id")?,
        spec,
        std::time::Instant::now(),
        r.get("started_unix")?,
    );
    run.clock.started = None;
    run.live = false;
    run.launch.sweep = r.get("sweep")?;
    run.status = known(r, "status", |s| s.parse::<RunStatus>().ok())?;
    run.reason = r.get("reason")?;
    run.clock.ended_unix = r.get("ended_unix")?;
    let sps: Option<f64> = r.get::<_, Option<f64>>("samples_per_s")?.and_then(rate);
    let rank_min: Option<f64> = r.get::<_, Option<f64>>("rank_min")?.and_then(rate);
    let rank_max: Option<f64> = r.get::<_, Option<f64>>("rank_max")?.and_then(rate);
    run.figures.aggregate = sps.map(|s| Aggregate {
        samples_per_s: s,
        per_rank: Vec::new(),
        rank_min: rank_min.unwrap_or(0.0),
        rank_max: rank_max.unwrap_or(0.0),
    });
    run.set_transport(r.get("transport")?);
    run.launch.gpus_shared = r.get("gpus_shared")?;
    run.launch.nccl_read = json_col(r, "nccl_read_json")?;
    run.evidence.caveats = json_col(r, "caveats_json")?;
    if let Some(text) = r.get::<_, Option<String>>("observed_json")? {
        run.seen.observed = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "run {} in the database has an unreadable observed_json: {e}",
                spec_id(r)
            )
        })?;
    }
    run.seen.instrument = r
        .get::<_, Option<String>>("instrument")?
        .and_then(|s| serde_json::from_value(serde_json::Value::String(s)).ok());
    run.seen.comm_timing = r
        .get::<_, Option<String>>("comm_timing")?
        .as_deref()
        .and_then(crate::protocol::CommTiming::parse);
    if let Some(text) = r.get::<_, Option<String>>("collectives_json")? {
        run.figures.coll_summary = Some(serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "run {} in the database has an unreadable collectives_json: {e}",
                spec_id(r)
            )
        })?);
    }
    run.launch.versions = json_col(r, "versions_json")?;
    run.evidence.hang_report = json_col(r, "hang_report_json")?;
    run.evidence.rank_tails = json_col(r, "rank_tails_json")?;
    run.evidence.diagnoses = json_col(r, "diagnoses_json")?;
    run.figures.grad_bytes = r.get::<_, Option<i64>>("grad_bytes")?.map(|b| b as u64);
    run.figures.bucket_bytes = json_col(r, "bucket_bytes_json")?;
    run.evidence.rejected = r.get::<_, i64>("rejected")? as u64;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{HandRolled, JaxSharding, OptimizerName, TorchStrategy};

    /// Issue 45: a data directory another user made in a shared parent (the /tmp fallback) is
    /// refused in one line, not written into.
    #[test]
    fn a_data_dir_planted_by_another_user_in_a_shared_parent_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return; // only root can make a directory of another user's here
        }
        let root = tempfile::tempdir().unwrap();
        let theirs = crate::paths::dir_in_a_shared_parent(root.path(), "ddptop-data", true);
        let e = Store::open(&theirs.join("runs.db"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
        assert!(!theirs.join("runs.db").exists());
    }
    use crate::supervisor::launch::CommandLine;

    /// Record a run's start as the engine does.
    fn insert(store: &Store, id: &str, spec: &RunSpec, dir: &Path) {
        let cmd = CommandLine {
            argv: vec!["x".into()],
            env: Default::default(),
            cwd: dir.into(),
        };
        store
            .insert_run(&NewRun {
                id,
                spec,
                sweep: None,
                command: &cmd,
                started_unix: 1.0,
                run_dir: dir,
            })
            .unwrap();
    }

    fn spec() -> RunSpec {
        let mut s = RunSpec {
            profile: Some("book-pcie".into()),
            samples: 1000,
            ..RunSpec::new(Experiment::Weak, 2, Backend::Sim)
        };
        s.nccl.toggle(crate::run::NcclVar::P2pDisable);
        s
    }

    #[test]
    fn run_round_trips_with_token_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let cmd = CommandLine {
            argv: vec!["ddptop".into(), "worker".into()],
            env: [("DDPTOP_TOKEN".to_string(), Some("secret".to_string()))].into(),
            cwd: dir.path().into(),
        };
        let s = spec();
        store
            .insert_run(&NewRun {
                id: "r1",
                spec: &s,
                sweep: Some("s1"),
                command: &cmd,
                started_unix: 5.0,
                run_dir: dir.path(),
            })
            .unwrap();
        let mut run = RunView::new("r1".into(), s.clone(), std::time::Instant::now(), 5.0);
        run.status = RunStatus::Completed;
        run.clock.ended_unix = Some(9.0);
        run.ranks.get_mut(&0).unwrap().result_sps = Some(100.0);
        run.ranks.get_mut(&1).unwrap().result_sps = Some(90.0);
        run.figures.aggregate = Aggregate::of(&run);
        let scaling = Scaling {
            speedup: 1.9,
            efficiency: 0.95,
            baseline: "r0".into(),
        };
        store.finalize(&run, Some(&scaling)).unwrap();
        let loaded = store.load_runs(10).unwrap();
        assert_eq!(loaded.len(), 1);
        let l = &loaded[0];
        assert_eq!(l.status, RunStatus::Completed);
        assert_eq!(l.spec, s);
        assert_eq!(l.figures.aggregate.as_ref().unwrap().samples_per_s, 190.0);
        let environ: String = store
            .conn
            .query_row("SELECT environ_json FROM runs", [], |r| r.get(0))
            .unwrap();
        assert!(!environ.contains("secret") && environ.contains("<redacted>"));
    }

    #[test]
    fn hello_tokens_are_not_stored_and_the_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let data = parent.path().join("data");
        let mut store = Store::open(&data.join("runs.db")).unwrap();
        let token = "f".repeat(64);
        let line = format!(
            r#"{{"v":1,"type":"hello","token":"{token}","run_id":"r","rank":0,"world_size":1,"local_rank":0,"pid":7,"host":"h","device":"cpu","backend":"gloo","worker":"train","torch":null,"nccl":null,"cuda":null,"t":1.0}}"#
        );
        let hello = crate::protocol::parse_worker(&line).unwrap();
        store
            .add_events(&[EventRow::from_msg("r", &hello).unwrap()])
            .unwrap();
        drop(store);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        for f in std::fs::read_dir(&data).unwrap().flatten() {
            assert_eq!(mode(&f.path()), 0o600, "{}", f.path().display());
            let bytes = std::fs::read(f.path()).unwrap();
            assert!(
                !bytes.windows(64).any(|w| w == token.as_bytes()),
                "the token is in {}",
                f.path().display()
            );
        }
        // An existing open database of ours is closed too.
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(data.join("runs.db"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let store = Store::open(&data.join("runs.db")).unwrap();
        let body: String = store
            .conn
            .query_row("SELECT body FROM events WHERE type='hello'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(
            body.contains("\"pid\":7") && !body.contains("token"),
            "{body}"
        );
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("runs.db")), 0o600);
    }

    /// What an older ddptop stored from a hostile worker (1.7e308 samples/s, a bench row of
    /// 1e300 GB/s) is read back as absent, not as a figure to plot.
    #[test]
    fn implausible_stored_figures_are_left_out_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = spec();
        insert(&store, "r1", &s, dir.path());
        let mut run = RunView::new("r1".into(), s, std::time::Instant::now(), 5.0);
        run.status = RunStatus::Completed;
        run.ranks.get_mut(&0).unwrap().result_sps = Some(1.7e308);
        run.ranks.get_mut(&1).unwrap().result_sps = Some(90.0);
        run.figures.aggregate = Some(Aggregate {
            samples_per_s: 1.7e308,
            per_rank: vec![1.7e308, 90.0],
            rank_min: 90.0,
            rank_max: 1.7e308,
        });
        store.finalize(&run, None).unwrap();
        let bench = r#"{"rank":0,"step":1,"t":1.0,"op":"all_reduce","bytes":1024,"dtype":"float32","iters":5,"time_us":10.0,"algbw_gbs":1e300,"busbw_gbs":1e300}"#;
        let mut row = EventRow::note("r1", "x");
        row.kind = "bench".into();
        row.body = bench.replace(r#"{"rank""#, r#"{"type":"bench","rank""#);
        let mut good = row.clone();
        good.body = row.body.replace("1e300", "12.5");
        store.add_events(&[row, good]).unwrap();
        let l = &store.load_runs(10).unwrap()[0];
        assert!(l.figures.aggregate.is_none(), "{:?}", l.figures.aggregate);
        assert_eq!(l.ranks[&0].result_sps, None);
        assert_eq!(l.ranks[&1].result_sps, Some(90.0));
        assert_eq!(
            l.figures.bench.len(),
            1,
            "only the plausible row: {:?}",
            l.figures.bench
        );
        assert_eq!(l.figures.bench[0].busbw_gbs, 12.5);
    }

    #[test]
    fn history_keeps_each_ranks_last_timeline_and_every_probe_block() {
        use crate::protocol::{Buckets, Probe, ProbeMode};
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = spec();
        insert(&store, "r", &s, dir.path());
        let mut rows = Vec::new();
        for step in 1..=50u64 {
            for rank in 0..2u32 {
                let b = WorkerMsg::Buckets(Buckets {
                    rank,
                    step,
                    t: 0.0,
                    rebuilt: true,
                    bwd_compute_ms: 1.0,
                    exposed_ms: 0.0,
                    buckets: vec![],
                    start_inferred: None,
                });
                rows.push(EventRow::from_msg("r", &b).unwrap());
            }
        }
        for block in 0..4 {
            let mode = if block % 2 == 0 {
                ProbeMode::Synced
            } else {
                ProbeMode::NoSync
            };
            let p = WorkerMsg::Probe(Probe {
                rank: 0,
                step: 60,
                t: 0.0,
                block,
                mode,
                steps: 10,
                median_ms: 1.0,
                min_ms: 1.0,
                max_ms: 1.0,
                live: None,
            });
            rows.push(EventRow::from_msg("r", &p).unwrap());
        }
        store.add_events(&rows).unwrap();
        let mut run = RunView::new("r".into(), s, std::time::Instant::now(), 1.0);
        run.status = RunStatus::Completed;
        store.finalize(&run, None).unwrap();
        let loaded = store.load_runs(5).unwrap();
        let l = &loaded[0];
        assert_eq!(l.figures.probe.len(), 4);
        assert_eq!(l.ranks[&0].buckets.as_ref().unwrap().step, 50);
        assert_eq!(l.ranks[&1].buckets.as_ref().unwrap().step, 50);
    }

    /// A run stored before the archive: its per-step messages are rows and packs (a JSON
    /// array of lines per flush), and both are counted.
    #[test]
    fn runs_without_an_archive_count_their_rows_and_packs() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        insert(&store, "r", &spec(), dir.path());
        let row = |kind: &str, body: &str| EventRow {
            run_id: "r".into(),
            unix: 1.0,
            rank: None,
            kind: kind.into(),
            body: body.into(),
        };
        store
            .add_events(&[
                row("step", r#"{"v":1,"type":"step"}"#),
                row(
                    "step_pack",
                    r#"[{"v":1,"type":"step"},{"v":1,"type":"step"}]"#,
                ),
                row("buckets_pack", r#"[{"v":1,"type":"buckets"}]"#),
            ])
            .unwrap();
        assert_eq!(store.stored_messages("r", "step").unwrap(), 3);
        assert_eq!(store.stored_messages("r", "buckets").unwrap(), 1);
        // With an archive, the archive counts (it holds every one).
        store.archive().push("r", r#"{"v":1,"type":"step"}"#);
        store.archive().flush().unwrap();
        assert_eq!(store.stored_messages("r", "step").unwrap(), 1);
    }

    #[test]
    fn a_named_straggler_is_stored_with_the_run_and_its_log_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = spec();
        insert(&store, "r", &s, dir.path());
        let named = crate::run::view::Straggler {
            rank: 1,
            score: 0.66,
            phase: "data wait".into(),
            evidence: "rank 1 at 0.66 of the fastest: data wait 23.6 ms vs 0.3 ms median".into(),
            since: 1.6,
            step: 27,
            active: true,
        };
        store
            .add_events(&[
                EventRow::straggler("r", &named),
                EventRow::note("r", &format!("straggler: {}", named.evidence)),
            ])
            .unwrap();
        let mut run = RunView::new("r".into(), s, std::time::Instant::now(), 1.0);
        run.status = RunStatus::Completed;
        store.finalize(&run, None).unwrap();
        let loaded = store.load_runs(5).unwrap();
        assert_eq!(loaded[0].straggler.named, vec![named]);
        assert!(
            loaded[0]
                .evidence.log_tail
                .iter()
                .any(|l| l == "ddptop: straggler: rank 1 at 0.66 of the fastest: data wait 23.6 ms vs 0.3 ms median"),
            "{:?}",
            loaded[0].evidence.log_tail
        );
    }

    #[test]
    fn a_runs_per_phase_table_as_of_its_end_is_stored_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = spec();
        insert(&store, "r", &s, dir.path());
        let mut run = RunView::new("r".into(), s, std::time::Instant::now(), 1.0);
        run.status = RunStatus::Completed;
        run.straggler.phase_scores = vec![crate::run::view::PhaseScore {
            phase: "data wait".into(),
            ranks: [(0, 0.3), (1, 23.6)].into_iter().collect(),
            median_ms: 11.95,
            worst_rank: 1,
            worst_ms: 23.6,
            worst_vs_median: 23.6 / 11.95,
        }];
        store.finalize(&run, None).unwrap();
        assert_eq!(
            store.load_runs(5).unwrap()[0].straggler.phase_scores,
            run.straggler.phase_scores
        );
    }

    #[test]
    fn an_attached_runs_script_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db")).unwrap();
        let mut s = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        s.family = crate::run::Family::Attach {
            target: Some(crate::run::AttachTarget {
                script: "/home/u/train.py".into(),
                args: vec!["--epochs".into(), "3".into()],
                cwd: "/home/u".into(),
            }),
        };
        insert(&store, "r1", &s, dir.path());
        insert(&store, "r2", &spec(), dir.path());
        let loaded = store.load_runs(10).unwrap();
        let by_id = |id: &str| loaded.iter().find(|r| r.id == id).unwrap().spec.clone();
        assert_eq!(by_id("r1"), s);
        assert_eq!(by_id("r2").attach(), None);
        let corrupt = |sql: &str| {
            store.conn.execute(sql, []).unwrap();
            store.load_runs(10).unwrap_err().to_string()
        };
        let err = corrupt("UPDATE runs SET family_json = '{' WHERE id = 'r1'");
        assert!(
            err.contains("run r1") && err.contains("family_json"),
            "{err}"
        );
        // A row stored before `family_json`: its script is read from `attach_json`.
        let old = serde_json::to_string(s.attach().unwrap()).unwrap();
        store
            .conn
            .execute(
                "UPDATE runs SET family_json = NULL, attach_json = ?1 WHERE id = 'r1'",
                [&old],
            )
            .unwrap();
        assert_eq!(
            store
                .load_runs(10)
                .unwrap()
                .iter()
                .find(|r| r.id == "r1")
                .unwrap()
                .spec,
            s
        );
        let err = corrupt("UPDATE runs SET attach_json = '{' WHERE id = 'r1'");
        assert!(
            err.contains("run r1") && err.contains("attach_json"),
            "{err}"
        );
    }

    /// Rows from before the family column keep their family's settings in columns of their
    /// own: they read as the same family, and a value this ddptop does not know is an error.
    #[test]
    fn rows_without_a_family_column_read_from_the_old_columns() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db")).unwrap();
        for (id, e) in [
            ("f", Experiment::Fsdp),
            ("j", Experiment::Jax),
            ("h", Experiment::Handrolled),
            ("w", Experiment::Weak),
        ] {
            insert(&store, id, &RunSpec::new(e, 2, Backend::Gloo), dir.path());
        }
        store
            .conn
            .execute_batch(
                "UPDATE runs SET family_json = NULL;
                 UPDATE runs SET strategy = 'ddp', optimizer = 'adam' WHERE id = 'f';
                 UPDATE runs SET sharding = 'fsdp' WHERE id = 'j';
                 UPDATE runs SET hand = 'threads+ring' WHERE id = 'h';
                 UPDATE runs SET strategy = 'ddp', hand = 'threads+ring' WHERE id = 'w';",
            )
            .unwrap();
        let loaded = store.load_runs(10).unwrap();
        let family = |id: &str| {
            loaded
                .iter()
                .find(|r| r.id == id)
                .unwrap()
                .spec
                .family
                .clone()
        };
        assert_eq!(
            family("f"),
            Family::Fsdp {
                strategy: TorchStrategy::Ddp,
                optimizer: OptimizerName::Adam
            }
        );
        assert_eq!(
            family("j"),
            Family::Jax {
                sharding: JaxSharding::Fsdp
            }
        );
        assert_eq!(
            family("h"),
            Family::Handrolled {
                hand: HandRolled::DEFICITS[2]
            }
        );
        // Another family's columns mean nothing to a weak run.
        assert_eq!(family("w"), Family::Weak);
        store
            .conn
            .execute("UPDATE runs SET strategy = 'zero3' WHERE id = 'f'", [])
            .unwrap();
        let err = store.load_runs(10).unwrap_err().to_string();
        assert!(err.contains("run f") && err.contains("strategy"), "{err}");
    }

    #[test]
    fn observed_settings_and_caveats_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        insert(&store, "a", &s, dir.path());
        let mut run = RunView::new("a".into(), s, std::time::Instant::now(), 1.0);
        run.status = RunStatus::Completed;
        run.seen.observed.step_samples.insert(64, 100);
        run.seen.observed.steps = 50;
        run.seen.observed.process_group = Some(false);
        run.seen.observed.ddp_module = Some(false);
        run.add_caveat(crate::run::Caveat::perturbed("the live probe ran"));
        store.finalize(&run, None).unwrap();
        let weak = spec();
        insert(&store, "w", &weak, dir.path());
        let mut w = RunView::new("w".into(), weak, std::time::Instant::now(), 2.0);
        w.status = RunStatus::Completed;
        store.finalize(&w, None).unwrap();
        let loaded = store.load_runs(5).unwrap();
        let by_id = |id: &str| loaded.iter().find(|r| r.id == id).unwrap();
        assert_eq!(by_id("a").seen.observed, run.seen.observed);
        assert_eq!(by_id("a").evidence.caveats, run.evidence.caveats);
        assert_eq!(
            by_id("a").perturbation().as_deref(),
            Some("the live probe ran")
        );
        // Only attached runs carry observed settings.
        assert_eq!(by_id("w").seen.observed, crate::run::Observed::default());
        assert!(by_id("w").evidence.caveats.is_empty());
    }

    #[test]
    fn databases_without_new_columns_are_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        drop(Store::open(&path).unwrap());
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "ALTER TABLE runs DROP COLUMN data_path;
             ALTER TABLE runs DROP COLUMN comm_timing;
             ALTER TABLE runs DROP COLUMN collectives_json;
             ALTER TABLE runs DROP COLUMN instrument;",
        )
        .unwrap();
        drop(c);
        let store = Store::open(&path).unwrap();
        let s = RunSpec {
            data_path: DataPath::Loader,
            ..spec()
        };
        insert(&store, "m", &s, dir.path());
        assert_eq!(
            store.load_runs(1).unwrap()[0].spec.data_path,
            DataPath::Loader
        );
        // A run stored before the NCCL profiler plugin: nothing of it.
        let old = &store.load_runs(1).unwrap()[0];
        assert_eq!(
            (old.seen.comm_timing, &old.figures.coll_summary),
            (None, &None)
        );
    }

    #[test]
    fn a_loader_run_stored_before_the_books_pipeline_reads_as_the_fast_loader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let store = Store::open(&path).unwrap();
        let s = RunSpec {
            data_path: DataPath::Loader,
            ..spec()
        };
        insert(&store, "old", &s, dir.path());
        drop(store);
        // As an older ddptop left it: `loader` was its faster pipeline, no user_version.
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 0;")
            .unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.load_runs(1).unwrap()[0].spec.data_path,
            DataPath::FastLoader
        );
        // Once: a book's-pipeline run stored now stays `loader` on the next open.
        insert(&store, "new", &s, dir.path());
        drop(store);
        let store = Store::open(&path).unwrap();
        let runs = store.load_runs(2).unwrap();
        let by_id = |id: &str| runs.iter().find(|r| r.id == id).unwrap().spec.data_path;
        assert_eq!(by_id("new"), DataPath::Loader);
        assert_eq!(by_id("old"), DataPath::FastLoader);
    }

    #[test]
    fn the_nccl_profilers_collectives_round_trip() {
        use crate::run::collectives::{
            BusbwClass, CollSummary, FuncSummary, RankSummary, StepCount,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("runs.db")).unwrap();
        let s = RunSpec::new(Experiment::Attach, 2, Backend::Nccl);
        insert(&store, "p", &s, dir.path());
        let mut run = RunView::new("p".into(), s, std::time::Instant::now(), 1.0);
        run.status = RunStatus::Completed;
        run.seen.comm_timing = Some(crate::protocol::CommTiming::NcclProfiler);
        run.seen.instrument = Some(crate::protocol::Instrument::Full);
        let mut r0 = RankSummary {
            loss: crate::run::collectives::LossCounters {
                dropped: 2,
                ..Default::default()
            },
            ..RankSummary::default()
        };
        r0.funcs.insert(
            "all_reduce".into(),
            FuncSummary {
                count: 7,
                bytes: 89406548,
                kernel_ms: 0.62,
            },
        );
        r0.algos.insert("ring/simple".into(), 7);
        r0.last_seq.insert("all_reduce".into(), 2064);
        r0.busbw.push(BusbwClass {
            func: "all_reduce".into(),
            from_bytes: 16 << 20,
            n: 2,
            busbw_gbs: Some(150.4),
        });
        let summary = CollSummary {
            ranks: [(0, r0.clone()), (1, r0)].into_iter().collect(),
            per_step: vec![StepCount {
                func: "all_reduce".into(),
                count: 1.0,
                bytes: 44703272.0,
                steps: 10,
                receipt: Some((1, 44703272)),
                matches: Some(true),
            }],
            timeline_source: Some("nccl_profiler".into()),
        };
        run.figures.coll_summary = Some(summary.clone());
        store.finalize(&run, None).unwrap();
        let loaded = &store.load_runs(1).unwrap()[0];
        assert_eq!(loaded.figures.coll_summary.as_ref(), Some(&summary));
        assert_eq!(
            loaded.seen.comm_timing,
            Some(crate::protocol::CommTiming::NcclProfiler)
        );
        assert_eq!(
            loaded.seen.instrument,
            Some(crate::protocol::Instrument::Full)
        );
        // A damaged column is named, not read as "no collectives".
        store
            .conn
            .execute("UPDATE runs SET collectives_json = '{' WHERE id = 'p'", [])
            .unwrap();
        let err = store.load_runs(1).unwrap_err().to_string();
        assert!(
            err.contains("run p") && err.contains("collectives_json"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_backend_is_an_error_not_sim() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("runs.db")).unwrap();
        insert(&store, "t", &spec(), dir.path());
        store
            .conn
            .execute("UPDATE runs SET backend='tpu'", [])
            .unwrap();
        let err = store.load_runs(5).unwrap_err().to_string();
        assert!(
            err.contains("run t") && err.contains("backend `tpu`"),
            "{err}"
        );
    }

    #[test]
    fn ghost_runs_of_dead_owners_are_marked_failed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let store = Store::open(&path).unwrap();
        insert(&store, "ghost", &spec(), dir.path());
        // Pretend a dead process owned it (pid 0x7fff_fff0 does not exist).
        store
            .conn
            .execute("UPDATE runs SET owner_pid=2147483632", [])
            .unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.status_of("ghost").unwrap().as_deref(), Some("failed"));
    }
}
