//! Turning a `RunSpec` into a process: the command line, the environment, the run directory,
//! and the spawn in a process group of its own with output going to the run's log file.

use crate::protocol::Backend;
use crate::run::{DEFAULT_PROFILE, RunSpec, Worker};
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

pub fn shell_quote(s: &str) -> String {
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
    /// A run across nodes (`--nodes`): `command_for` builds node 0's command (this machine),
    /// `node_command` the others'.
    pub nodes: Option<&'a NodePlan>,
    /// ddptop's NCCL profiler plugin, set as `NCCL_PROFILER_PLUGIN` on every NCCL launch
    /// (`None`: off, `--no-nccl-profiler` / `nccl_profiler = false`, or not built).
    pub nccl_profiler: Option<&'a Path>,
}

/// A run across nodes on torchrun's c10d rendezvous: one torchrun agent per node, all with the
/// run id as rendezvous id and the same endpoint (docs/multinode.md).
#[derive(Debug, Clone, PartialEq)]
pub struct NodePlan {
    /// Node names. The first is this machine (its agent is started directly and hosts the
    /// rendezvous store); the others are started through `remote`.
    pub hosts: Vec<String>,
    /// Each node's own address, when given (`--nodes name=addr`): torchrun's `--local-addr`,
    /// which the other nodes use to reach that node's processes (else its host name's).
    pub addrs: Vec<Option<String>>,
    pub nproc_per_node: u32,
    /// `host:port` of the c10d rendezvous store (on node 0).
    pub rdzv_endpoint: String,
    /// `host:port` of ddptop's TCP listener, where ranks on other nodes connect.
    pub tcp: String,
    /// How to run a command on a node: `{host}` and `{cmd}` (one shell command line).
    pub remote: String,
    /// How to signal a node's processes, when not through `remote`: `{host}`, `{sig}`, `{pids}`,
    /// `{slurm_step}` (e.g. `scancel --signal={sig} {slurm_step}`).
    pub stop: Option<String>,
    /// Variables from ddptop's own environment passed on to the other nodes (GLOO_*, NCCL_*).
    pub forward_env: Vec<(String, String)>,
    /// The TCP listener's certificate fingerprint (SHA-256 of its DER, hex) when the channel is
    /// TLS: the node wrappers read it from stdin after the token, never from a command line.
    pub tls_fingerprint: Option<String>,
}

impl NodePlan {
    pub fn nnodes(&self) -> u32 {
        self.hosts.len() as u32
    }
}

/// torchrun's flags for node `node` of a multi-node run of world size `k`.
pub(crate) fn rendezvous_flags(run_id: &str, plan: &NodePlan, node: usize) -> Vec<String> {
    let mut v = vec![
        format!("--nnodes={}", plan.nnodes()),
        format!("--node-rank={node}"),
        format!("--nproc-per-node={}", plan.nproc_per_node),
        "--rdzv-backend=c10d".into(),
        format!("--rdzv-endpoint={}", plan.rdzv_endpoint),
        format!("--rdzv-id={run_id}"),
        // Node 0 hosts the store whatever its address looks like (a namespace's veth address
        // or a second NIC would not match the host name torchrun's heuristic compares with).
        format!(
            "--rdzv-conf=is_host={},join_timeout=120",
            u8::from(node == 0)
        ),
        "--max-restarts=0".into(),
    ];
    if let Some(a) = plan.addrs.get(node).cloned().flatten() {
        v.push(format!("--local-addr={a}"));
    }
    v
}

/// Split a command template into words: whitespace separates, '…' and "…" quote (no escapes
/// inside single quotes, backslash escapes inside double quotes and outside).
pub fn split_template(t: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed ' in `{t}`")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => cur.extend(chars.next()),
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed \" in `{t}`")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("empty command template".into());
    }
    Ok(words)
}

/// A template's argv with `{name}` placeholders replaced (each word stays one argument).
pub fn fill_template(t: &str, vars: &[(&str, &str)]) -> Result<Vec<String>, String> {
    Ok(split_template(t)?
        .into_iter()
        .map(|w| {
            vars.iter()
                .fold(w, |w, (k, v)| w.replace(&format!("{{{k}}}"), v))
        })
        .collect())
}

/// The command that starts node `node`'s torchrun agent through the node template. `local` is
/// node 0's command from `command_for`. The token never appears on a command line: ddptop
/// writes it to the command's stdin, the wrapper reads it into the environment. The wrapper
/// prints `ddptop-node N pid=PID slurm=JOB.STEP` first, so ddptop can signal the agent later
/// through the same channel.
pub fn node_command(
    local: &CommandLine,
    run_id: &str,
    plan: &NodePlan,
    node: usize,
) -> anyhow::Result<CommandLine> {
    let host = &plan.hosts[node];
    let (from, to) = (
        rendezvous_flags(run_id, plan, 0),
        rendezvous_flags(run_id, plan, node),
    );
    // Node 0's rendezvous flags are one run in its argv: put this node's in their place.
    let mut argv = local.argv.clone();
    let at = argv
        .windows(from.len())
        .position(|w| w == from.as_slice())
        .ok_or_else(|| anyhow::anyhow!("node 0's command has no rendezvous flags"))?;
    argv.splice(at..at + from.len(), to);
    let mut env = local.env.clone();
    env.remove("DDPTOP_TOKEN");
    let scheme = if plan.tls_fingerprint.is_some() {
        "tls"
    } else {
        "tcp"
    };
    env.insert(
        "DDPTOP_SOCKET".into(),
        Some(format!("{scheme}://{}", plan.tcp)),
    );
    env.insert("DDPTOP_NODE".into(), Some(host.clone()));
    for (k, v) in &plan.forward_env {
        env.entry(k.clone()).or_insert_with(|| Some(v.clone()));
    }
    let mut exec = vec!["exec".to_string(), "env".to_string()];
    for (k, v) in &env {
        match v {
            Some(v) => exec.push(shell_quote(&format!("{k}={v}"))),
            None => exec.extend(["-u".to_string(), shell_quote(k)]),
        }
    }
    exec.extend(argv.iter().map(|a| shell_quote(a)));
    let run_dir = env
        .get("DDPTOP_FR_DIR")
        .cloned()
        .flatten()
        .unwrap_or_else(|| local.cwd.display().to_string());
    let script = format!(
        "mkdir -p {rd} 2>/dev/null; cd {cwd} || exit 97; IFS= read -r DDPTOP_TOKEN || exit 98; \
         export DDPTOP_TOKEN; {tls}echo \"ddptop-node {node} pid=$$ slurm=${{SLURM_JOB_ID:-}}.${{SLURM_STEP_ID:-}}\"; {}",
        exec.join(" "),
        rd = shell_quote(&run_dir),
        cwd = shell_quote(&local.cwd.display().to_string()),
        // The fingerprint is the second line of stdin (`launch::node_secret`).
        tls = if plan.tls_fingerprint.is_some() {
            "IFS= read -r DDPTOP_TLS_FP || exit 98; export DDPTOP_TLS_FP; "
        } else {
            ""
        },
    );
    let cmd = format!("sh -c {}", shell_quote(&script));
    let argv = fill_template(&plan.remote, &[("host", host), ("cmd", &cmd)])
        .map_err(|e| anyhow::anyhow!("[nodes] remote: {e}"))?;
    Ok(CommandLine {
        argv,
        env: BTreeMap::new(),
        cwd: local.cwd.clone(),
    })
}

/// The command that sends `sig` (INT, TERM, KILL) to a node's agent and workers: through the
/// `stop` template when the config has one (`{pids}`: the agent's pid, the one pid ddptop
/// knows from the channel itself), else through `remote` with `kill`: the agent, and each
/// rank pid (its process group, then the pid itself: torchrun starts each worker in a session
/// of its own) only when the node finds it under the agent in /proc, since ranks name their
/// own pids.
pub fn node_stop_command(
    plan: &NodePlan,
    node: usize,
    sig: &str,
    agent: Option<u32>,
    rank_pids: &[u32],
    slurm_step: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let host = &plan.hosts[node];
    let agent_s = agent.map(|a| a.to_string()).unwrap_or_default();
    if let Some(t) = &plan.stop {
        return fill_template(
            t,
            &[
                ("host", host),
                ("sig", sig),
                ("pids", &agent_s),
                ("slurm_step", slurm_step.unwrap_or("")),
            ],
        )
        .map_err(|e| anyhow::anyhow!("[nodes] stop: {e}"));
    }
    let Some(a) = agent.filter(|a| *a > 1) else {
        anyhow::bail!("node {host}: its agent's pid is not known");
    };
    let list: Vec<String> = rank_pids
        .iter()
        .filter(|p| **p > 1)
        .map(u32::to_string)
        .collect();
    let list = list.join(" ");
    let script = format!(
        "a={a}; under() {{ q=$1; n=0; while [ \"$q\" -gt 1 ] && [ $n -lt 256 ]; do \
         [ \"$q\" = \"$a\" ] && return 0; \
         q=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$q/status 2>/dev/null); [ -n \"$q\" ] || return 1; \
         n=$((n+1)); done; return 1; }}; \
         for p in {list}; do under $p || continue; kill -s {sig} -- -$p 2>/dev/null; kill -s {sig} $p 2>/dev/null; done; \
         kill -s {sig} -- -$a 2>/dev/null; kill -s {sig} $a 2>/dev/null; true"
    );
    let cmd = format!("sh -c {}", shell_quote(&script));
    fill_template(&plan.remote, &[("host", host), ("cmd", &cmd)])
        .map_err(|e| anyhow::anyhow!("[nodes] remote: {e}"))
}

/// `--flag value` pairs as argv entries.
fn flags<const N: usize>(pairs: [(&str, String); N]) -> impl Iterator<Item = String> {
    pairs.into_iter().flat_map(|(f, v)| [f.to_string(), v])
}

/// Build the command for a run. Pure: no process is started.
pub fn command_for(spec: &RunSpec, ctx: &LaunchContext) -> anyhow::Result<CommandLine> {
    let mut cwd = ctx.run_dir.to_path_buf();
    let mut env: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), Some(v));
    };
    set("DDPTOP_SOCKET", ctx.socket.display().to_string());
    set("DDPTOP_TOKEN", ctx.token.to_string());
    set("DDPTOP_RUN_ID", ctx.run_id.to_string());
    set("PYTHONUNBUFFERED", "1".into());
    // A rank killed by SIGABRT/SIGSEGV/SIGBUS first prints every Python thread's stack: where it
    // died is then in its own last lines (issue 51's abort said only "terminate called").
    set("PYTHONFAULTHANDLER", "1".into());
    let argv = match spec.backend {
        Backend::Sim => sim_argv(spec, ctx)?,
        Backend::Gloo | Backend::Nccl => {
            let py = ctx.python.ok_or_else(|| {
                anyhow::anyhow!(
                    "backend {} needs Python with torch; none was found (set --python or `python` in the config)",
                    spec.backend.as_str()
                )
            })?;
            if let Some(f) = &spec.inject {
                if f.sim_only() {
                    anyhow::bail!("the garbage fault exists only on --backend sim");
                }
                // The Python workers read the fault from their environment (train loop).
                set("DDPTOP_INJECT", f.to_string());
            }
            let d = ctx.run_dir.display();
            set("PYTHONPATH", py.workers_dir.display().to_string());
            if spec.backend == Backend::Nccl {
                // NCCL's INFO log goes to the run directory, where ddptop reads the
                // transport. gloo loads no NCCL: the variables would only be noise in what
                // the run lists as set.
                set("NCCL_DEBUG", "INFO".into());
                set("NCCL_DEBUG_FILE", format!("{d}/nccl.%h.%p.log"));
            }
            // Flight recorder: mode 3 (torchrun defaults workers to 1, which skips dumps). The
            // current names only: torch 2.11 warns on every rank about the deprecated
            // TORCH_NCCL_TRACE_BUFFER_SIZE / _DEBUG_INFO_TEMP_FILE (a gloo run's log would start
            // with that warning); the workers copy them to the old names for an older torch
            // (ddptop_worker/fr_env.py). DUMP_ON_TIMEOUT and the pipe have no new name.
            set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3".into());
            set("TORCH_FR_BUFFER_SIZE", "2000".into());
            set("TORCH_NCCL_DUMP_ON_TIMEOUT", "1".into());
            set("TORCH_FR_DUMP_TEMP_FILE", format!("{d}/fr_rank"));
            set("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", format!("{d}/fr_pipe_"));
            set("DDPTOP_FR_DIR", d.to_string());
            if spec.backend == Backend::Nccl && std::env::var_os("DDPTOP_TIME_EVERY").is_none() {
                // After warm-up, GPU runs time one step every 0.2-0.45 s of run time (events,
                // hook timing, a step message): 1 in 16 at 40 steps/s, every step at 2 steps/s,
                // so a slowed rank is named within 5 s at any step rate while the cost stays
                // bounded by time (workers/ddptop_worker/cadence.py; 1 in 10 was 99.7% of a
                // bare loop on one H200, every step 97.9%: docs/performance.md). Samples are
                // still all counted; `--env DDPTOP_TIME_EVERY=1` times every step, `=10` 1 in 10.
                set("DDPTOP_TIME_EVERY", "auto".into());
            }
            let worker = spec.kind().worker(&spec.worker_input());
            for (k, v) in spec.kind().worker_env(&spec.worker_input()) {
                set(k, v);
            }
            if let Some(a) = spec.attach() {
                attach_env(spec, py, &mut set);
                cwd = a.cwd.clone();
            }
            // JAX and the tch worker start their own processes; every other family runs under
            // torchrun.
            let torchrun = worker.uses_torchrun();
            if spec.backend == Backend::Gloo
                && torchrun
                && std::env::var_os("OMP_NUM_THREADS").is_none()
            {
                // torchrun gives each rank one OpenMP thread only when it starts more than one
                // on its node. The same at every k keeps a CPU curve a comparison of k, not of
                // thread counts (k=1 had every core), and ranks of a multi-node run that share
                // a machine's cores (one per node) from oversubscribing them, which spun
                // OpenMP threads at 3x the CPU of a run. The user's own setting wins.
                set("OMP_NUM_THREADS", "1".into());
            }
            if matches!(worker, Worker::Handrolled(_)) {
                super::handrolled::prepare(spec, &py.python, &mut set)?;
            }
            if let Some(plan) = ctx.nodes {
                check_node_plan(spec, plan, torchrun)?;
                set("DDPTOP_NODE", plan.hosts[0].clone());
            }
            worker_argv(worker, spec, py, ctx)
        }
    };
    if let Some(p) = ctx.nccl_profiler.filter(|_| spec.backend == Backend::Nccl) {
        // Every collective from NCCL itself (docs/profiler.md); on other nodes the same path.
        env.insert(
            super::nccl_profiler::ENV.into(),
            Some(p.display().to_string()),
        );
    }
    // The run's own settings last (ddptop's NCCL_NVLS_ENABLE=0 among them unless turned off):
    // they win, and `None` removes a variable. On gloo only DDP's, as nothing reads NCCL's.
    let settings = spec.nccl.for_backend(spec.backend);
    for (k, v) in settings.launch_env() {
        env.insert(k.to_string(), v.map(str::to_string));
    }
    // Tell the workers that NCCL loads ddptop's plugin (not a plugin of the user's own `--env`,
    // which won above): attach then leaves DDP's all-reduce alone on NCCL and the plugin times
    // the buckets (docs/profiler.md).
    let ours = ctx.nccl_profiler.map(|p| p.display().to_string());
    if ours.is_some() && env.get(super::nccl_profiler::ENV).cloned().flatten() == ours {
        env.insert(super::nccl_profiler::ON_ENV.into(), Some("1".into()));
    }
    Ok(CommandLine { argv, env, cwd })
}

/// `--nodes` runs torchrun on each node: the experiment must use it, and k must be the nodes
/// times the processes per node.
fn check_node_plan(spec: &RunSpec, plan: &NodePlan, torchrun: bool) -> anyhow::Result<()> {
    if !torchrun {
        anyhow::bail!(
            "--nodes runs torchrun on each node; the {} experiment does not use torchrun",
            spec.experiment().as_str()
        );
    }
    if plan.nproc_per_node * plan.nnodes() != spec.k {
        anyhow::bail!(
            "k={} is not {} nodes × {} processes per node",
            spec.k,
            plan.nnodes(),
            plan.nproc_per_node
        );
    }
    Ok(())
}

/// The environment of an attached script: ddptop's bootstrap first on PYTHONPATH (its
/// `sitecustomize` connects each rank), then the worker package, then the user's own path.
/// Why ddptop puts each variable it adds into a launch's environment: `show` and the run
/// details list them for an attached job, whose environment is otherwise the user's own.
/// `None` for a variable ddptop does not add (the user's `--env`, a preset).
pub fn why_set(var: &str) -> Option<&'static str> {
    Some(match var {
        "PYTHONPATH" => "loads ddptop's bootstrap (sitecustomize) and its worker package",
        "PYTHONUNBUFFERED" => "each rank's output reaches the log as it is printed, not at exit",
        "PYTHONFAULTHANDLER" => {
            "a rank killed by a signal prints its Python stacks: where it died is in its last lines"
        }
        "DDPTOP_SOCKET" | "DDPTOP_TOKEN" | "DDPTOP_RUN_ID" => "how each rank reaches ddptop",
        "DDPTOP_BACKEND" => "the backend the bootstrap reports before the script's process group",
        "DDPTOP_FR_DIR" => "where a rank writes its flight recorder and stacks on a hang",
        "DDPTOP_TIME_EVERY" => {
            "time 1 step in N after warm-up, or `auto`: one every 0.2-0.45 s (all are counted)"
        }
        "DDPTOP_INJECT" => "the fault asked for with --inject",
        "DDPTOP_NODE" => "the node name a rank reports",
        "NCCL_DEBUG" => "NCCL's INFO log: the transport it chose and the variables it read",
        "NCCL_PROFILER_PLUGIN" => {
            "ddptop's NCCL profiler plugin: every collective from NCCL (--no-nccl-profiler: off)"
        }
        "DDPTOP_NCCL_PLUGIN" => {
            "NCCL loads ddptop's plugin: attach leaves DDP's all-reduce and your comm hooks alone"
        }
        "NCCL_DEBUG_FILE" => "that log goes to the run directory, not to your output",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING" => {
            "3: a failed collective dumps the flight recorder (torchrun's default, 1, skips it)"
        }
        "TORCH_FR_BUFFER_SIZE" | "TORCH_NCCL_TRACE_BUFFER_SIZE" => {
            "flight recorder on (2,000 entries): the watchdog reads pending collectives from it"
        }
        "TORCH_NCCL_DUMP_ON_TIMEOUT"
        | "TORCH_FR_DUMP_TEMP_FILE"
        | "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
        | "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" => "flight-recorder dumps go to the run directory",
        "CUDA_VISIBLE_DEVICES" => "--backend gloo: GPUs hidden, so the script picks gloo",
        "OMP_NUM_THREADS" => "one OpenMP thread per rank at every k, as torchrun gives at k > 1",
        "NCCL_NVLS_ENABLE" => {
            "ddptop's default for every launch: NVLink multicast off (--nvls on leaves it to NCCL)"
        }
        _ => return None,
    })
}

fn attach_env(spec: &RunSpec, py: &PythonEnv, set: &mut impl FnMut(&str, String)) {
    let mut path = vec![
        py.workers_dir
            .join("ddptop_bootstrap")
            .display()
            .to_string(),
        py.workers_dir.display().to_string(),
    ];
    path.extend(std::env::var("PYTHONPATH").ok().filter(|p| !p.is_empty()));
    set("PYTHONPATH", path.join(":"));
    // What the bootstrap says in hello before the script has built its process group.
    set("DDPTOP_BACKEND", spec.backend.as_str().into());
    if spec.backend == Backend::Gloo {
        // The script picks its own backend; tutorial scripts pick gloo when torch sees no GPU.
        set("CUDA_VISIBLE_DEVICES", String::new());
    }
}

/// `ddptop worker sim …`: the launcher of the simulated ranks.
fn sim_argv(spec: &RunSpec, ctx: &LaunchContext) -> anyhow::Result<Vec<String>> {
    if spec.model != crate::run::ModelName::Resnet18 {
        anyhow::bail!(crate::run::SIM_MODEL_ONLY);
    }
    let mut v = vec![
        std::env::current_exe()?.display().to_string(),
        "worker".into(),
        "sim".into(),
    ];
    v.extend(flags([
        (
            "--profile",
            spec.profile
                .clone()
                .unwrap_or_else(|| DEFAULT_PROFILE.into()),
        ),
        ("--experiment", spec.experiment().as_str().into()),
        ("--world-size", spec.k.to_string()),
        ("--batch", spec.batch.to_string()),
        ("--epochs", spec.epochs.to_string()),
        ("--samples", spec.samples.to_string()),
        ("--speed", ctx.sim_speed.to_string()),
    ]));
    if ctx.nodes.is_some() {
        anyhow::bail!("--nodes needs torchrun: use --backend gloo or nccl");
    }
    if let Some(n) = ctx.sim_noise {
        v.extend(flags([("--noise", n.to_string())]));
    }
    for (k, val) in spec.nccl.launch_env() {
        if let Some(val) = val {
            v.extend(flags([("--env", format!("{k}={val}"))]));
        }
    }
    if let Some(f) = &spec.inject {
        v.extend(flags([("--inject", f.to_string())]));
    }
    Ok(v)
}

/// `--standalone --nproc-per-node=k`, or the c10d rendezvous flags of node 0.
fn where_flags(spec: &RunSpec, ctx: &LaunchContext) -> Vec<String> {
    let mut v = match ctx.nodes {
        Some(plan) => rendezvous_flags(ctx.run_id, plan, 0),
        None => vec![
            "--standalone".into(),
            format!("--nproc-per-node={}", spec.k),
        ],
    };
    v.extend(rank_log_flags(ctx.run_dir));
    v
}

/// Every rank's stdout and stderr into its own file under the run folder, and teed into
/// `output.log` with torchrun's `[default<local rank>]:` prefix: a rank that dies by a signal
/// (SIGABRT after "terminate called…", SIGSEGV) keeps its own last lines, told apart from its
/// peers' and from torchrun's summary (`supervisor::output::rank_tails`).
fn rank_log_flags(run_dir: &Path) -> [String; 2] {
    [
        "--tee=3".into(),
        format!("--log-dir={}", run_dir.join(RANK_LOG_DIR).display()),
    ]
}

/// The folder of a run where torchrun writes each rank's `stdout.log` / `stderr.log`.
pub const RANK_LOG_DIR: &str = "ranks";

/// The family's worker (`FamilyKind::worker`) as a command line: `torchrun
/// --standalone --nproc-per-node=k -m ddptop_worker ARGS`, `python -m ddptop_worker ARGS` (one
/// process for all k devices), the user's script under torchrun, or the tch binary.
fn worker_argv(worker: Worker, spec: &RunSpec, py: &PythonEnv, ctx: &LaunchContext) -> Vec<String> {
    match worker {
        Worker::Torchrun(args) => {
            let mut v = py.torchrun.clone();
            v.extend(where_flags(spec, ctx));
            v.extend([
                "--monitor-interval=0.1".into(),
                "-m".into(),
                "ddptop_worker".into(),
            ]);
            v.extend(args);
            v
        }
        Worker::Python(args) => {
            let mut v = vec![
                py.python.display().to_string(),
                "-m".into(),
                "ddptop_worker".into(),
            ];
            v.extend(args);
            v
        }
        Worker::Script => {
            let mut v = py.torchrun.clone();
            v.extend(where_flags(spec, ctx));
            v.push("--monitor-interval=0.1".into());
            if let Some(a) = spec.attach() {
                v.push(a.script.display().to_string());
                v.extend(a.args.iter().cloned());
            }
            v
        }
        // One Rust process drives every replica: no torchrun, no Python.
        Worker::Handrolled(data_flags) => super::handrolled::argv(spec, data_flags),
    }
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

/// The first line of a node channel's stdout, once it has arrived.
pub type FirstLine = std::sync::Arc<std::sync::OnceLock<String>>;

/// Spawn another node's channel command like `spawn`, with `secret` and a newline written to
/// its stdin (then closed): the node's wrapper reads the run's token from there. Its stdout
/// comes through a pipe: copied to `output.log` unchanged, and its first line (the wrapper's
/// `ddptop-node …`) kept apart, so that only the channel itself can name the agent.
pub fn spawn_with_secret(
    cmd: &CommandLine,
    run_dir: &Path,
    secret: &str,
) -> anyhow::Result<(tokio::process::Child, FirstLine)> {
    use std::io::Write;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("output.log"))?;
    let (program, args) = cmd
        .argv
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("empty command"))?;
    // A pipe holds far more than a token: write it before the child starts reading, then close.
    let (rd, mut wr) = std::io::pipe()?;
    wr.write_all(format!("{secret}\n").as_bytes())?;
    drop(wr);
    let mut c = tokio::process::Command::new(program);
    c.args(args)
        .current_dir(&cmd.cwd)
        .stdin(Stdio::from(rd))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log.try_clone()?))
        .process_group(0);
    let mut child = c
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start `{program}`: {e}"))?;
    let first = FirstLine::default();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(relay_channel(out, log, first.clone()));
    }
    Ok((child, first))
}

/// Copy a channel's stdout to the log as it comes, keeping its first line (at most 256 bytes).
async fn relay_channel(mut out: tokio::process::ChildStdout, log: std::fs::File, first: FirstLine) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let mut log = log;
    let mut head: Option<Vec<u8>> = Some(Vec::new());
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match out.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(h) = head.as_mut() {
            h.extend_from_slice(&buf[..n]);
            if let Some(i) = h.iter().position(|b| *b == b'\n') {
                let _ = first.set(String::from_utf8_lossy(&h[..i]).into_owned());
                head = None;
            } else if h.len() > 256 {
                head = None; // not a wrapper's line: no agent is known
            }
        }
        // Appends of a few KiB to a local file: brief enough for the runtime's thread.
        if log.write_all(&buf[..n]).is_err() {
            break;
        }
    }
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
/// Imports torch (2–3 s of CPU): only where the GPU count decides something (`--backend auto`
/// or `nccl`); see [`probe_torch_installed`].
pub fn probe_torch(py: &Path) -> Result<(String, u32), String> {
    probe(
        py,
        "import torch;print(torch.__version__);print(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
    )
}

/// Where torch is installed, without importing it: its version (`torch/version.py`, the text
/// `torch.__version__` comes from, else the package metadata) and 0 GPUs. For `--backend gloo`,
/// which does not ask CUDA anything: the workers import torch themselves, and a torch that is
/// installed but broken fails their run with its own last line.
pub fn probe_torch_installed(py: &Path) -> Result<(String, u32), String> {
    probe(py, PROBE_INSTALLED)
}

const PROBE_INSTALLED: &str = "\
import importlib.util as u, importlib.metadata as m, os, sys
s = u.find_spec('torch')
if s is None or not s.origin:
    sys.exit(1)
ns = {}
try:
    exec(open(os.path.join(os.path.dirname(s.origin), 'version.py')).read(), ns)
except Exception:
    pass
print(ns.get('__version__') or m.version('torch'))
print(0)";

fn probe(py: &Path, code: &str) -> Result<(String, u32), String> {
    let out = std::process::Command::new(py)
        .args(["-c", code])
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{Experiment, NcclVar};

    fn ctx<'a>(dir: &'a Path, py: Option<&'a PythonEnv>) -> LaunchContext<'a> {
        LaunchContext {
            run_id: "r1",
            token: "tok",
            socket: Path::new("/run/ddptop-1/s.sock"),
            run_dir: dir,
            python: py,
            sim_speed: 1.0,
            sim_noise: None,
            nodes: None,
            nccl_profiler: Some(Path::new("/opt/ddptop/libnccl_profiler_ddptop.so")),
        }
    }

    #[test]
    fn torch_runs_get_torchrun_the_worker_and_flight_recorder_env() {
        let py = PythonEnv {
            python: "/venv/bin/python".into(),
            torchrun: vec!["/venv/bin/torchrun".into()],
            workers_dir: "/repo/workers".into(),
        };
        let mut spec = RunSpec::new(Experiment::Weak, 2, Backend::Nccl);
        spec.nccl.toggle(NcclVar::P2pDisable);
        spec.nccl.set("NCCL_ALGO", None);
        let dir = Path::new("/data/runs/r1");
        let cmd = command_for(&spec, &ctx(dir, Some(&py))).unwrap();
        let argv = cmd.argv.join(" ");
        assert!(
            argv.starts_with("/venv/bin/torchrun --standalone --nproc-per-node=2"),
            "{argv}"
        );
        assert!(
            argv.contains("-m ddptop_worker train --experiment weak --batch 256"),
            "{argv}"
        );
        assert!(
            argv.ends_with(
                "--data-path device --backend nccl --torch-settings book --data synthetic"
            ),
            "{argv}"
        );
        let env = |k: &str| cmd.env.get(k).cloned().flatten();
        assert_eq!(
            env("NCCL_DEBUG_FILE").as_deref(),
            Some("/data/runs/r1/nccl.%h.%p.log")
        );
        assert_eq!(env("TORCH_NCCL_ASYNC_ERROR_HANDLING").as_deref(), Some("3"));
        // torch 2.11's current flight-recorder names; the deprecated ones make it warn.
        assert_eq!(env("TORCH_FR_BUFFER_SIZE").as_deref(), Some("2000"));
        assert_eq!(env("TORCH_NCCL_TRACE_BUFFER_SIZE"), None);
        assert_eq!(env("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), None);
        assert_eq!(
            env("TORCH_NCCL_DEBUG_INFO_PIPE_FILE").as_deref(),
            Some("/data/runs/r1/fr_pipe_")
        );
        assert_eq!(env("NCCL_NVLS_ENABLE").as_deref(), Some("0"));
        assert_eq!(env("NCCL_P2P_DISABLE").as_deref(), Some("1"));
        // GPU ranks keep torch's own thread count; gloo ranks get one OpenMP thread each at
        // every k (unless this process has its own OMP_NUM_THREADS, which then wins).
        assert_eq!(env("OMP_NUM_THREADS"), None);
        if std::env::var_os("OMP_NUM_THREADS").is_none() {
            for k in [1, 2] {
                let gloo = RunSpec::new(Experiment::Weak, k, Backend::Gloo);
                let cmd = command_for(&gloo, &ctx(dir, Some(&py))).unwrap();
                assert_eq!(
                    cmd.env.get("OMP_NUM_THREADS").cloned().flatten().as_deref(),
                    Some("1"),
                    "k={k}"
                );
            }
        }
        assert_eq!(
            env("NCCL_PROFILER_PLUGIN").as_deref(),
            Some("/opt/ddptop/libnccl_profiler_ddptop.so"),
            "NCCL launches load ddptop's profiler plugin"
        );
        assert_eq!(env("DDPTOP_NCCL_PLUGIN").as_deref(), Some("1"));
        // A plugin of the user's own wins, and the workers are not told ddptop's is loaded.
        let mut own = spec.clone();
        own.nccl.set(
            "NCCL_PROFILER_PLUGIN",
            Some("/x/libnccl-profiler-inspector.so".into()),
        );
        let own_cmd = command_for(&own, &ctx(dir, Some(&py))).unwrap();
        assert_eq!(own_cmd.env.get("DDPTOP_NCCL_PLUGIN"), None);
        assert_eq!(env("PYTHONPATH").as_deref(), Some("/repo/workers"));
        // GPU runs time by run time after warm-up, unless ddptop's own environment says.
        if std::env::var_os("DDPTOP_TIME_EVERY").is_none() {
            assert_eq!(env("DDPTOP_TIME_EVERY").as_deref(), Some("auto"));
        }
        // A toggle set to None removes the variable from the launch.
        assert_eq!(cmd.env.get("NCCL_ALGO"), Some(&None));
        assert!(cmd.shell().contains("-u NCCL_ALGO"));
        assert!(
            !cmd.shell().contains("tok"),
            "the token never reaches the recorded shell line"
        );
    }

    #[test]
    fn gloo_sweep_stops_at_16_mib_and_real_backends_need_python() {
        let py = PythonEnv {
            python: "python3".into(),
            torchrun: vec![
                "python3".into(),
                "-m".into(),
                "torch.distributed.run".into(),
            ],
            workers_dir: "/w".into(),
        };
        let dir = Path::new("/d");
        let spec = RunSpec::new(Experiment::Allreduce, 2, Backend::Gloo);
        let cmd = command_for(&spec, &ctx(dir, Some(&py))).unwrap();
        assert!(
            !cmd.env.contains_key("NCCL_PROFILER_PLUGIN")
                && !cmd.env.contains_key("DDPTOP_NCCL_PLUGIN"),
            "gloo runs have no NCCL to profile"
        );
        let argv = cmd.argv.join(" ");
        assert!(
            argv.ends_with("allreduce --backend gloo --max-bytes 16777216"),
            "{argv}"
        );
        let err = command_for(&spec, &ctx(dir, None)).unwrap_err().to_string();
        assert!(err.contains("needs Python with torch"), "{err}");
    }

    #[test]
    fn jax_runs_are_one_python_process_with_k_devices() {
        let py = PythonEnv {
            python: "/venv/bin/python".into(),
            torchrun: vec!["/venv/bin/torchrun".into()],
            workers_dir: "/repo/workers".into(),
        };
        let mut spec = RunSpec::new(Experiment::Jax, 4, Backend::Gloo);
        spec.family = crate::run::Family::Jax {
            sharding: crate::run::JaxSharding::Fsdp,
        };
        spec.model = crate::run::ModelName::Tiny;
        let cmd = command_for(&spec, &ctx(Path::new("/d"), Some(&py))).unwrap();
        assert_eq!(
            cmd.argv.join(" "),
            "/venv/bin/python -m ddptop_worker jax --k 4 --sharding fsdp --batch 256 --epochs 2 \
             --samples 60000 --model tiny --data-path device --platform cpu --data synthetic"
        );
        let env = |k: &str| cmd.env.get(k).cloned().flatten();
        assert_eq!(
            env("XLA_FLAGS").as_deref(),
            Some("--xla_force_host_platform_device_count=4")
        );
        assert_eq!(env("JAX_PLATFORMS").as_deref(), Some("cpu"));
        // On GPUs XLA's collectives are NCCL's: ddptop's NCCL settings apply as for torch.
        let gpu = command_for(
            &RunSpec::new(Experiment::Jax, 2, Backend::Nccl),
            &ctx(Path::new("/d"), Some(&py)),
        )
        .unwrap();
        assert!(gpu.argv.join(" ").contains("--platform gpu"));
        assert!(!gpu.env.contains_key("XLA_FLAGS"));
        assert_eq!(
            gpu.env
                .get("NCCL_NVLS_ENABLE")
                .cloned()
                .flatten()
                .as_deref(),
            Some("0")
        );
    }

    #[test]
    fn attached_scripts_run_unchanged_with_the_bootstrap_first_on_the_path() {
        let py = PythonEnv {
            python: "/venv/bin/python".into(),
            torchrun: vec!["/venv/bin/torchrun".into()],
            workers_dir: "/repo/workers".into(),
        };
        let mut spec = RunSpec::new(Experiment::Attach, 2, Backend::Gloo);
        spec.family = crate::run::Family::Attach {
            target: Some(crate::run::AttachTarget {
                script: "/home/u/train.py".into(),
                args: vec!["--epochs".into(), "3".into()],
                cwd: "/home/u".into(),
            }),
        };
        spec.inject = Some("hang:5".parse().unwrap());
        let cmd = command_for(&spec, &ctx(Path::new("/data/runs/r1"), Some(&py))).unwrap();
        assert_eq!(
            cmd.argv.join(" "),
            "/venv/bin/torchrun --standalone --nproc-per-node=2 --tee=3 \
             --log-dir=/data/runs/r1/ranks --monitor-interval=0.1 /home/u/train.py --epochs 3"
        );
        assert_eq!(
            cmd.cwd,
            Path::new("/home/u"),
            "the script runs where the user is"
        );
        let env = |k: &str| cmd.env.get(k).cloned().flatten();
        assert!(
            env("PYTHONPATH")
                .unwrap()
                .starts_with("/repo/workers/ddptop_bootstrap:/repo/workers")
        );
        assert_eq!(env("DDPTOP_BACKEND").as_deref(), Some("gloo"));
        assert_eq!(env("CUDA_VISIBLE_DEVICES").as_deref(), Some(""));
        assert_eq!(env("DDPTOP_INJECT").as_deref(), Some("hang:5"));
        assert_eq!(env("DDPTOP_FR_DIR").as_deref(), Some("/data/runs/r1"));
        let nccl = RunSpec {
            backend: Backend::Nccl,
            ..spec
        };
        let cmd = command_for(&nccl, &ctx(Path::new("/d"), Some(&py))).unwrap();
        assert!(!cmd.env.contains_key("CUDA_VISIBLE_DEVICES"));
        assert_eq!(
            cmd.env
                .get("NCCL_NVLS_ENABLE")
                .cloned()
                .flatten()
                .as_deref(),
            Some("0")
        );
    }

    /// `show` and the run details explain an attached job's environment from `why_set` alone,
    /// and docs/attach.md lists it: a variable added to the launch code and not there would
    /// reach the user's job unexplained.
    #[test]
    fn every_variable_an_attached_job_gets_says_why_and_is_documented() {
        let py = PythonEnv {
            python: "/venv/bin/python".into(),
            torchrun: vec!["/venv/bin/torchrun".into()],
            workers_dir: "/repo/workers".into(),
        };
        let plan = NodePlan {
            hosts: vec!["a".into(), "b".into()],
            addrs: vec![None, None],
            nproc_per_node: 1,
            rdzv_endpoint: "a:29400".into(),
            tcp: "a:5000".into(),
            remote: "ssh {host} -- {cmd}".into(),
            stop: None,
            forward_env: vec![],
            tls_fingerprint: None,
        };
        let doc = include_str!("../../docs/attach.md");
        let section = doc
            .split("## What attach adds to your job's environment")
            .nth(1)
            .expect("docs/attach.md has the section");
        for backend in [Backend::Gloo, Backend::Nccl] {
            for nodes in [None, Some(&plan)] {
                let mut spec = RunSpec::new(Experiment::Attach, 2, backend);
                spec.family = crate::run::Family::Attach {
                    target: Some(crate::run::AttachTarget {
                        script: "/home/u/train.py".into(),
                        args: vec![],
                        cwd: "/home/u".into(),
                    }),
                };
                spec.inject = Some("hang:5".parse().unwrap());
                let mut c = ctx(Path::new("/d"), Some(&py));
                c.nodes = nodes;
                let cmd = command_for(&spec, &c).unwrap();
                let unexplained: Vec<&String> =
                    cmd.env.keys().filter(|k| why_set(k).is_none()).collect();
                assert!(
                    unexplained.is_empty(),
                    "{backend:?}: not in why_set: {unexplained:?}"
                );
                let undocumented: Vec<&String> = cmd
                    .env
                    .keys()
                    .filter(|k| !section.contains(&format!("`{k}")))
                    .collect();
                assert!(
                    undocumented.is_empty(),
                    "{backend:?}: not in docs/attach.md: {undocumented:?}"
                );
                if backend == Backend::Gloo {
                    let nccl: Vec<&String> =
                        cmd.env.keys().filter(|k| k.starts_with("NCCL_")).collect();
                    assert!(nccl.is_empty(), "gloo loads no NCCL: {nccl:?}");
                }
            }
        }
    }

    #[test]
    fn multi_node_runs_use_the_c10d_rendezvous_instead_of_standalone() {
        let py = PythonEnv {
            python: "/venv/bin/python".into(),
            torchrun: vec!["/venv/bin/torchrun".into()],
            workers_dir: "/repo/workers".into(),
        };
        let plan = NodePlan {
            hosts: vec!["a".into(), "b".into()],
            addrs: vec![None, None],
            nproc_per_node: 2,
            rdzv_endpoint: "a:29400".into(),
            tcp: "a:5000".into(),
            remote: "ssh -o BatchMode=yes {host} -- {cmd}".into(),
            stop: None,
            forward_env: vec![("GLOO_SOCKET_IFNAME".into(), "eth1".into())],
            tls_fingerprint: None,
        };
        let mut c = ctx(Path::new("/d"), Some(&py));
        c.nodes = Some(&plan);
        let mut spec = RunSpec::new(Experiment::Attach, 4, Backend::Nccl);
        spec.family = crate::run::Family::Attach {
            target: Some(crate::run::AttachTarget {
                script: "/home/u/train.py".into(),
                args: vec![],
                cwd: "/home/u".into(),
            }),
        };
        let cmd = command_for(&spec, &c).unwrap();
        assert_eq!(
            cmd.argv.join(" "),
            "/venv/bin/torchrun --nnodes=2 --node-rank=0 --nproc-per-node=2 --rdzv-backend=c10d \
             --rdzv-endpoint=a:29400 --rdzv-id=r1 --rdzv-conf=is_host=1,join_timeout=120 \
             --max-restarts=0 --tee=3 --log-dir=/d/ranks --monitor-interval=0.1 /home/u/train.py"
        );
        assert_eq!(
            cmd.env.get("DDPTOP_NODE").cloned().flatten().as_deref(),
            Some("a")
        );
        // ssh gets the whole command line as one argument, for the node's shell.
        let node = node_command(&cmd, "r1", &plan, 1).unwrap();
        assert_eq!(node.argv[..5], ["ssh", "-o", "BatchMode=yes", "b", "--"]);
        assert_eq!(node.argv.len(), 6);
        assert!(node.argv[5].starts_with("sh -c '"), "{}", node.argv[5]);
        assert!(node.argv[5].contains("GLOO_SOCKET_IFNAME=eth1"));
        assert!(node.argv[5].contains("--node-rank=1"));
        let stop = node_stop_command(&plan, 1, "TERM", Some(6), &[7, 8], None).unwrap();
        assert_eq!(stop[3], "b");
        assert!(
            stop[5].contains("for p in 7 8; do under $p || continue; kill -s TERM -- -$p"),
            "{stop:?}"
        );
        assert!(stop[5].contains("a=6;"), "{stop:?}");
        // Without the agent's pid from its channel, nothing on the node is signalled.
        assert!(node_stop_command(&plan, 1, "TERM", None, &[7, 8], None).is_err());
        // Not torchrun, not k = nodes × nproc: refused.
        let jax = RunSpec::new(Experiment::Jax, 4, Backend::Nccl);
        assert!(command_for(&jax, &c).is_err());
        let odd = RunSpec::new(Experiment::Weak, 3, Backend::Nccl);
        assert!(
            command_for(&odd, &c)
                .unwrap_err()
                .to_string()
                .contains("2 nodes")
        );
        let sim = RunSpec::new(Experiment::Weak, 4, Backend::Sim);
        assert!(command_for(&sim, &c).is_err());
    }

    #[test]
    fn templates_split_like_a_shell_and_fill_placeholders() {
        assert_eq!(
            fill_template(
                r#"srun -w {host} --export="A B" sh -c {cmd}"#,
                &[("host", "n1"), ("cmd", "echo 'x y'")]
            )
            .unwrap(),
            ["srun", "-w", "n1", "--export=A B", "sh", "-c", "echo 'x y'"]
        );
        assert!(split_template("ssh 'open").is_err());
        assert!(split_template("  ").is_err());
    }

    #[test]
    fn sim_runs_pass_their_toggles_and_faults() {
        let mut spec = RunSpec::new(Experiment::Weak, 4, Backend::Sim);
        spec.nccl.toggle(NcclVar::ShmUseCudaMemcpy);
        spec.inject = Some("hang:5".parse().unwrap());
        let argv = command_for(&spec, &ctx(Path::new("/d"), None))
            .unwrap()
            .argv
            .join(" ");
        assert!(
            argv.contains("worker sim --profile h200-nvlink --experiment weak --world-size 4"),
            "{argv}"
        );
        assert!(
            argv.contains(
                "--env NCCL_NVLS_ENABLE=0 --env NCCL_SHM_USE_CUDA_MEMCPY=1 --inject hang:5"
            ),
            "{argv}"
        );
    }

    /// A python whose only packages are in `dir` (`-S`: no site-packages of its own).
    fn python_with_only(dir: &Path, name: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let runs = std::process::Command::new("python3")
            .arg("-c")
            .arg("1")
            .output();
        if !runs.is_ok_and(|o| o.status.success()) {
            assert!(std::env::var_os("CI").is_none(), "CI has python3");
            return None;
        }
        let wrapper = dir.join(name);
        let script = format!(
            "#!/bin/sh\nPYTHONPATH='{}' exec python3 -S \"$@\"\n",
            dir.join("site").display()
        );
        std::fs::write(&wrapper, script).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(wrapper)
    }

    /// `--backend gloo` finds torch and its version without importing it (seconds of CPU per
    /// launch): a torch whose import fails still answers, and a missing one is the usual error.
    #[test]
    fn an_installed_torch_is_found_without_importing_it() {
        let d = tempfile::tempdir().unwrap();
        let torch = d.path().join("site/torch");
        std::fs::create_dir_all(&torch).unwrap();
        std::fs::write(
            torch.join("__init__.py"),
            "raise ImportError('the probe must not import torch')\n",
        )
        .unwrap();
        std::fs::write(torch.join("version.py"), "__version__ = '9.9.9+probe'\n").unwrap();
        let Some(py) = python_with_only(d.path(), "py") else {
            return;
        };
        assert_eq!(
            probe_torch_installed(&py),
            Ok(("9.9.9+probe".to_string(), 0))
        );
        assert!(probe_torch(&py).is_err(), "the full probe imports torch");

        std::fs::remove_dir_all(&torch).unwrap();
        let e = probe_torch_installed(&py).unwrap_err();
        assert!(
            e.ends_with("cannot import torch (pip install torch==2.11.0)"),
            "{e}"
        );
    }
}
