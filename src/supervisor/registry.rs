//! Which runs may connect and who is connected: one token per run, each rank admitted once, the
//! senders of ddptop's lines to each rank, plugin and agent, closed with the run. Shared by every
//! connection kind (`socket`, `tcp`, `agent_conn`, `profiler_conn`); apart from `socket` so that
//! those that `socket` hands a connection to need not import it back.

use super::reader::Reader;
use super::reply::Via;
use crate::protocol::{ControlMsg, ErrorCode};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// A run's admission record.
struct RunAuth {
    token: String,
    world_size: u32,
    open: bool,
    seen_ranks: HashSet<u32>,
    senders: HashMap<u32, mpsc::UnboundedSender<ControlMsg>>,
    /// Ranks that connected over TCP (another node): their pids are not this machine's.
    remote: HashMap<u32, std::net::SocketAddr>,
    /// NCCL profiler plugin connections (`supervisor::profiler_conn`): closed with the run.
    profilers: Vec<mpsc::UnboundedSender<ControlMsg>>,
    /// Node agents (`ddptop agent`) by node name: one each; closed with the run.
    agents: HashMap<String, mpsc::UnboundedSender<crate::protocol::agent::ToAgent>>,
    /// The nodes whose agents may connect (a multi-node run's other nodes); none by default.
    agent_nodes: Vec<String>,
}

#[derive(Clone, Default)]
pub struct Registry {
    runs: Arc<Mutex<HashMap<String, RunAuth>>>,
    /// The paced reader that serves the admitted plain sockets: told when a command waits or
    /// a run's connections should close.
    reader: Arc<std::sync::OnceLock<Reader>>,
}

impl Registry {
    pub fn open_run(&self, run: &str, token: &str, world_size: u32) {
        self.lock().insert(
            run.to_string(),
            RunAuth {
                token: token.to_string(),
                world_size,
                open: true,
                seen_ranks: HashSet::new(),
                senders: HashMap::new(),
                remote: HashMap::new(),
                profilers: Vec::new(),
                agents: HashMap::new(),
                agent_nodes: Vec::new(),
            },
        );
    }

    /// Refuse new connections and drop the command channels, which closes every connection of
    /// the run: the workers' dead-man switches fire.
    pub fn close_run(&self, run: &str) {
        if let Some(a) = self.lock().get_mut(run) {
            a.open = false;
            a.senders.clear();
            a.profilers.clear();
            a.agents.clear();
        }
        self.wake_reader();
    }

    /// Send a command to every connected rank of a run; returns how many got it.
    pub fn command(&self, run: &str, msg: ControlMsg) -> usize {
        let sent = {
            let g = self.lock();
            let Some(a) = g.get(run) else { return 0 };
            a.senders
                .values()
                .filter(|s| s.send(msg.clone()).is_ok())
                .count()
        };
        self.wake_reader();
        sent
    }

    /// The peer address of a rank that connected over TCP; `None` for a local (Unix) rank.
    pub fn remote_peer(&self, run: &str, rank: u32) -> Option<std::net::SocketAddr> {
        self.lock().get(run)?.remote.get(&rank).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunAuth>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Give the registry the paced reader that serves its plain sockets (once, at start).
    pub(crate) fn set_reader(&self, reader: Reader) {
        let _ = self.reader.set(reader);
    }

    /// The paced reader of this registry's plain sockets (started with the Unix socket server).
    pub(crate) fn reader(&self) -> Option<&Reader> {
        self.reader.get()
    }

    fn wake_reader(&self) {
        if let Some(r) = self.reader.get() {
            r.wake();
        }
    }

    /// Admit a `hello`, or say why not.
    pub(crate) fn admit(
        &self,
        h: &crate::protocol::Hello,
        tx: mpsc::UnboundedSender<ControlMsg>,
        via: Via,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        same_world(h.world_size, &h.run_id, a.world_size)?;
        if !a.seen_ranks.insert(h.rank) {
            return Err((
                ErrorCode::DuplicateRank,
                format!("rank {} is already connected", h.rank),
            ));
        }
        a.senders.insert(h.rank, tx);
        if let Via::Tcp(peer) = via {
            a.remote.insert(h.rank, peer);
        }
        Ok(())
    }

    /// Admit an NCCL profiler plugin's `nccl_hello`: the run's token, an open run, its world
    /// size. Not a rank's connection: no duplicate check, no commands.
    pub(crate) fn admit_profiler(
        &self,
        h: &crate::protocol::NcclHello,
        tx: mpsc::UnboundedSender<ControlMsg>,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        same_world(h.world_size, &h.run_id, a.world_size)?;
        a.profilers.retain(|s| !s.is_closed());
        a.profilers.push(tx);
        Ok(())
    }

    /// Admit a node agent's `agent_hello`: the run's token, the run still open, one agent per
    /// node name. A refusal's reason is for ddptop's record only (the peer gets `REFUSED`).
    pub(crate) fn admit_agent(
        &self,
        h: &crate::protocol::agent::AgentHello,
        tx: mpsc::UnboundedSender<crate::protocol::agent::ToAgent>,
    ) -> Result<(), (ErrorCode, String)> {
        let mut g = self.lock();
        let a = open_run(&mut g, &h.run_id, &h.token)?;
        if !a.agent_nodes.contains(&h.node) {
            return Err((
                ErrorCode::BadMessage,
                format!("{} is not one of this run's other nodes", h.node),
            ));
        }
        if a.agents.get(&h.node).is_some_and(|s| !s.is_closed()) {
            return Err((
                ErrorCode::DuplicateRank,
                format!("node {} already has an agent", h.node),
            ));
        }
        a.agents.insert(h.node.clone(), tx);
        Ok(())
    }

    /// Let the agents of these nodes connect to `run` (its other nodes).
    pub fn allow_agents(&self, run: &str, nodes: &[String]) {
        if let Some(a) = self.lock().get_mut(run) {
            a.agent_nodes = nodes.to_vec();
        }
    }

    /// Send a command to a run's agent on `node`; whether it was sent.
    pub fn agent_command(
        &self,
        run: &str,
        node: &str,
        msg: crate::protocol::agent::ToAgent,
    ) -> bool {
        let g = self.lock();
        g.get(run)
            .and_then(|a| a.agents.get(node))
            .is_some_and(|s| s.send(msg).is_ok())
    }

    pub(crate) fn drop_agent(&self, run: &str, node: &str) {
        if let Some(a) = self.lock().get_mut(run) {
            a.agents.remove(node);
        }
    }

    pub(crate) fn drop_sender(&self, run: &str, rank: u32) {
        if let Some(a) = self.lock().get_mut(run) {
            a.senders.remove(&rank);
        }
    }
}

/// The run a connection's first line names, when its token matches and the run is still open.
/// An unknown run, a wrong token and a finished run get the same answer (`REFUSED`), so a
/// stranger cannot tell which run ids exist; the reason is only recorded here.
fn open_run<'a>(
    runs: &'a mut HashMap<String, RunAuth>,
    run_id: &str,
    token: &str,
) -> Result<&'a mut RunAuth, (ErrorCode, String)> {
    let refused = |why: String| (ErrorCode::BadToken, why);
    let a = runs
        .get_mut(run_id)
        .ok_or_else(|| refused(format!("no run `{run_id}` here")))?;
    if !constant_time_eq(a.token.as_bytes(), token.as_bytes()) {
        return Err(refused(format!("token does not match run {run_id}")));
    }
    if !a.open {
        return Err(refused(format!("run {run_id} has finished")));
    }
    Ok(a)
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A rank's or a plugin's `world_size` against the run's k: the same refusal for both.
fn same_world(claimed: u32, run_id: &str, k: u32) -> Result<(), (ErrorCode, String)> {
    if claimed == k {
        return Ok(());
    }
    Err((
        ErrorCode::BadMessage,
        format!("world_size {claimed} but run {run_id} has k={k}"),
    ))
}
