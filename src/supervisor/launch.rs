//! Turning a `RunSpec` into a process: the command line, the environment, the run directory,
//! and the spawn in a process group of its own with output going to the run's log file.

use crate::app::{Experiment, RunSpec};
use crate::protocol::Backend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Where the Python side lives and how to start it.
#[derive(Debug, Clone)]
pub struct PythonEnv {
    pub python: PathBuf,
    /// torchrun beside the python, else `python -m torch.distributed.run`.
    pub torchrun: Vec<String>,
    pub workers_dir: PathBuf,
}

/// The exact program, arguments and environment of a run: recorded in the store as-is.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct CommandLine {
    pub argv: Vec<String>,
    /// Variables ddptop sets (value) or removes (`None`) on top of its own environment.
    pub env: BTreeMap<String, Option<String>>,
    pub cwd: PathBuf,
}

impl CommandLine {
    pub fn shell(&self) -> String {
        let mut parts: Vec<String> = self
            .env
            .iter()
            .filter(|(k, _)| !k.starts_with("DDPTOP_TOKEN"))
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={}", shell_quote(v)),
                None => format!("-u {k}"),
            })
            .collect();
        parts.extend(self.argv.iter().map(|a| shell_quote(a)));
        parts.join(" ")
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub struct LaunchContext<'a> {
    pub run_id: &'a str,
    pub token: &'a str,
    pub socket: &'a Path,
    pub run_dir: &'a Path,
    pub python: Option<&'a PythonEnv>,
    /// Wall-clock speed-up of the simulated worker.
    pub sim_speed: f64,
    pub sim_noise: Option<f64>,
}

/// Build the command for a run. Pure: no process is started.
pub fn command_for(spec: &RunSpec, ctx: &LaunchContext) -> anyhow::Result<CommandLine> {
    let mut env: BTreeMap<String, Option<String>> = BTreeMap::new();
    env.insert(
        "DDPTOP_SOCKET".into(),
        Some(ctx.socket.display().to_string()),
    );
    env.insert("DDPTOP_TOKEN".into(), Some(ctx.token.to_string()));
    env.insert("DDPTOP_RUN_ID".into(), Some(ctx.run_id.to_string()));
    env.insert("PYTHONUNBUFFERED".into(), Some("1".into()));
    // NVLink multicast stays off on shared machines (and is irrelevant for k ≤ 2).
    env.insert("NCCL_NVLS_ENABLE".into(), Some("0".into()));
    let argv = match spec.backend {
        Backend::Sim => {
            let exe = std::env::current_exe()?;
            let mut v = vec![
                exe.display().to_string(),
                "worker".into(),
                "sim".into(),
                "--profile".into(),
                spec.profile.clone().unwrap_or_else(|| "h200-nvlink".into()),
                "--experiment".into(),
                spec.experiment.as_str().into(),
                "--world-size".into(),
                spec.k.to_string(),
                "--batch".into(),
                spec.batch.to_string(),
                "--epochs".into(),
                spec.epochs.to_string(),
                "--samples".into(),
                spec.samples.to_string(),
                "--speed".into(),
                ctx.sim_speed.to_string(),
            ];
            if let Some(n) = ctx.sim_noise {
                v.extend(["--noise".into(), n.to_string()]);
            }
            for (k, val) in &spec.env {
                if let Some(val) = val {
                    v.extend(["--env".into(), format!("{k}={val}")]);
                }
            }
            if let Some(f) = &spec.inject {
                v.extend(["--inject".into(), f.clone()]);
            }
            v
        }
        Backend::Gloo | Backend::Nccl => {
            let py = ctx.python.ok_or_else(|| {
                anyhow::anyhow!("backend {} needs Python with torch; none was found (set --python or `python` in the config)", spec.backend.as_str())
            })?;
            if let Some(f) = &spec.inject {
                if f.starts_with("garbage") {
                    anyhow::bail!("the garbage fault exists only on --backend sim");
                }
                // The Python workers read the fault from their environment (train loop).
                env.insert("DDPTOP_INJECT".into(), Some(f.clone()));
            }
            let d = ctx.run_dir.display();
            env.insert(
                "PYTHONPATH".into(),
                Some(py.workers_dir.display().to_string()),
            );
            env.insert("NCCL_DEBUG".into(), Some("INFO".into()));
            env.insert(
                "NCCL_DEBUG_FILE".into(),
                Some(format!("{d}/nccl.%h.%p.log")),
            );
            // Flight recorder: mode 3 (torchrun defaults workers to 1, which skips dumps).
            env.insert("TORCH_NCCL_ASYNC_ERROR_HANDLING".into(), Some("3".into()));
            env.insert("TORCH_FR_BUFFER_SIZE".into(), Some("2000".into()));
            env.insert("TORCH_NCCL_TRACE_BUFFER_SIZE".into(), Some("2000".into()));
            env.insert("TORCH_NCCL_DUMP_ON_TIMEOUT".into(), Some("1".into()));
            env.insert(
                "TORCH_FR_DUMP_TEMP_FILE".into(),
                Some(format!("{d}/fr_rank")),
            );
            env.insert(
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE".into(),
                Some(format!("{d}/fr_rank")),
            );
            env.insert(
                "TORCH_NCCL_DEBUG_INFO_PIPE_FILE".into(),
                Some(format!("{d}/fr_pipe_")),
            );
            env.insert("DDPTOP_FR_DIR".into(), Some(d.to_string()));
            let mut v = py.torchrun.clone();
            v.extend([
                "--standalone".into(),
                format!("--nproc-per-node={}", spec.k),
                "--monitor-interval=0.1".into(),
                "-m".into(),
                "ddptop_worker".into(),
            ]);
            let backend = spec.backend.as_str().to_string();
            match spec.experiment {
                Experiment::Weak | Experiment::Strong => v.extend([
                    "train".into(),
                    "--experiment".into(),
                    spec.experiment.as_str().into(),
                    "--batch".into(),
                    spec.batch.to_string(),
                    "--epochs".into(),
                    spec.epochs.to_string(),
                    "--samples".into(),
                    spec.samples.to_string(),
                    "--model".into(),
                    spec.model.as_str().into(),
                    "--data-path".into(),
                    spec.data_path.as_str().into(),
                    "--backend".into(),
                    backend,
                ]),
                Experiment::Probe => v.extend([
                    "probe".into(),
                    "--batch".into(),
                    spec.batch.to_string(),
                    "--model".into(),
                    spec.model.as_str().into(),
                    "--backend".into(),
                    backend,
                ]),
                Experiment::Allreduce => {
                    v.extend(["allreduce".into(), "--backend".into(), backend]);
                    if spec.backend == Backend::Gloo {
                        // 256 MiB all-reduces over gloo on a laptop take minutes; stop at 16 MiB.
                        v.extend(["--max-bytes".into(), (16u64 << 20).to_string()]);
                    }
                }
            }
            v
        }
    };
    for (k, v) in &spec.env {
        env.insert(k.clone(), v.clone());
    }
    Ok(CommandLine {
        argv,
        env,
        cwd: ctx.run_dir.to_path_buf(),
    })
}

/// Spawn in a new process group with stdout and stderr appended to `run_dir/output.log`.
pub fn spawn(cmd: &CommandLine, run_dir: &Path) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("output.log"))?;
    let (program, args) = cmd
        .argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty command"))?;
    let mut c = tokio::process::Command::new(program);
    c.args(args)
        .current_dir(&cmd.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .process_group(0);
    for (k, v) in &cmd.env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.spawn()
        .map_err(|e| anyhow::anyhow!("cannot start `{program}`: {e}"))
}

/// Find python with torch: `--python`/config > `DDPTOP_PYTHON` > `python3` on PATH; torchrun
/// from the config, else beside that python, else `python -m torch.distributed.run`.
/// Fails when there is no workers package.
pub fn find_python(
    flag: Option<&Path>,
    workers_flag: Option<&Path>,
    torchrun: Option<&Path>,
) -> Result<PythonEnv, String> {
    let python = flag
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("DDPTOP_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let workers_dir = crate::paths::workers_dir(workers_flag)
        .ok_or_else(|| "the ddptop_worker package (workers/) was not found; set --workers-dir or DDPTOP_WORKERS_DIR".to_string())?;
    let torchrun = torchrun
        .map(|p| vec![p.display().to_string()])
        .or_else(|| {
            python
                .parent()
                .map(|d| d.join("torchrun"))
                .filter(|p| p.is_file())
                .map(|p| vec![p.display().to_string()])
        })
        .unwrap_or_else(|| {
            vec![
                python.display().to_string(),
                "-m".into(),
                "torch.distributed.run".into(),
            ]
        });
    Ok(PythonEnv {
        python,
        torchrun,
        workers_dir,
    })
}

/// What torch sees: (torch version, CUDA device count). Err when python or torch is missing.
pub fn probe_torch(py: &Path) -> Result<(String, u32), String> {
    let out = std::process::Command::new(py)
        .args(["-c", "import torch;print(torch.__version__);print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", py.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} cannot import torch (pip install torch==2.11.0)",
            py.display()
        ));
    }
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.lines();
    let version = it.next().unwrap_or("?").to_string();
    let gpus = it.next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    Ok((version, gpus))
}
