//! The dashboard's launch target: this node, or every node of the config's `[nodes] hosts`
//! (docs/multinode.md). Plain data and the switch's rules; the engine holds the switch itself
//! (`Engine::set_all_nodes`), the header shows `badge`.

/// Where the dashboard's next launches run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchTarget {
    /// `[nodes] hosts` as written (`name` or `name=addr`), this machine first; empty when the
    /// config names no other node.
    pub hosts: Vec<String>,
    /// `[nodes] tls`: the channel to the other nodes is encrypted.
    pub tls: bool,
    /// Why `[nodes]` could not be read (file:line and the problem).
    pub broken: Option<String>,
    /// The config file, to say where `hosts` goes.
    pub config: Option<String>,
    /// Launches go across `hosts`.
    pub all: bool,
    /// What k this machine alone can launch (`State::max_k` on "this node"; 0 = no limit).
    pub local_max_k: u32,
}

impl LaunchTarget {
    /// The node names, without their `=addr`.
    pub fn names(&self) -> Vec<&str> {
        self.hosts
            .iter()
            .map(|h| h.split_once('=').map_or(h.as_str(), |(n, _)| n))
            .collect()
    }

    /// The largest k of a launch on this target: each node brings as many devices as this one
    /// (the check `ddptop run --nodes` makes; k must also split evenly over the nodes).
    pub fn max_k(&self) -> u32 {
        if self.all {
            self.local_max_k.saturating_mul(self.hosts.len() as u32)
        } else {
            self.local_max_k
        }
    }

    /// Switch between this node and all nodes. `Err` (one line, the target unchanged) when
    /// there is nothing to switch to or it cannot change now: `this_host` names this machine in
    /// the hint, `queued` launches were planned for the current target, `simulated` launches run
    /// here only. `Ok`: what the next launches do now.
    pub fn toggle(
        &mut self,
        this_host: &str,
        queued: usize,
        simulated: bool,
    ) -> Result<String, String> {
        if let Some(b) = &self.broken {
            return Err(format!("all nodes unavailable: {b}"));
        }
        if self.hosts.is_empty() {
            let host = if this_host.is_empty() {
                "THIS-HOST"
            } else {
                this_host
            };
            let file = self.config.as_deref().unwrap_or("the config");
            return Err(format!(
                "no other nodes: add hosts = [\"{host}\", \"OTHER-HOST\"] under [nodes] in {file} (docs/multinode.md)"
            ));
        }
        if simulated && !self.all {
            return Err("the simulated backend runs on this machine only: start ddptop with --backend gloo or nccl for all nodes".into());
        }
        if queued > 0 {
            return Err(format!(
                "{queued} queued launch(es) planned for {}: the target switches once the queue is empty (x cancels)",
                self.describe()
            ));
        }
        self.all = !self.all;
        Ok(if self.all {
            let k = match self.max_k() {
                0 => String::new(),
                m => format!(", k≤{m}"),
            };
            format!(
                "next launches: all {} nodes ({}){}; 1/2/4 are the world size across them{k}",
                self.hosts.len(),
                self.names().join(", "),
                if self.tls { ", TLS" } else { "" },
            )
        } else {
            "next launches: this node only".to_string()
        })
    }

    fn describe(&self) -> String {
        if self.all {
            format!("all {} nodes", self.hosts.len())
        } else {
            "this node".into()
        }
    }

    /// The header's badge: `nodes: 3 (tls)` or `this node`; `nodes: config error` for a broken
    /// table; `None` when the config names no other node (a one-machine user sees nothing new).
    pub fn badge(&self) -> Option<String> {
        if self.broken.is_some() {
            return Some("nodes: config error".into());
        }
        if self.hosts.is_empty() {
            return None;
        }
        Some(if self.all {
            format!(
                "nodes: {}{}",
                self.hosts.len(),
                if self.tls { " (tls)" } else { "" }
            )
        } else {
            "this node".into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three(tls: bool) -> LaunchTarget {
        LaunchTarget {
            hosts: vec!["gpu-a".into(), "gpu-b=10.0.0.2".into(), "gpu-c".into()],
            tls,
            local_max_k: 8,
            ..Default::default()
        }
    }

    #[test]
    fn the_switch_goes_both_ways_and_the_badge_and_k_follow() {
        let mut t = three(true);
        assert_eq!(t.badge().as_deref(), Some("this node"));
        assert_eq!(t.max_k(), 8);
        let msg = t.toggle("gpu-a", 0, false).unwrap();
        assert!(t.all);
        assert!(
            msg.contains("all 3 nodes (gpu-a, gpu-b, gpu-c), TLS"),
            "{msg}"
        );
        assert!(msg.contains("k≤24"), "{msg}");
        assert_eq!(t.badge().as_deref(), Some("nodes: 3 (tls)"));
        assert_eq!(t.max_k(), 24);
        assert_eq!(
            t.toggle("gpu-a", 0, false).unwrap(),
            "next launches: this node only"
        );
        assert!(!t.all);
        assert_eq!(three(false).badge().as_deref(), Some("this node"));
        let mut plain = three(false);
        plain.toggle("gpu-a", 0, false).unwrap();
        assert_eq!(plain.badge().as_deref(), Some("nodes: 3"));
        // CPU ranks or simulation: no limit on either target.
        plain.local_max_k = 0;
        assert_eq!(plain.max_k(), 0);
    }

    #[test]
    fn without_hosts_the_key_says_what_to_add_and_nothing_changes() {
        let mut t = LaunchTarget {
            config: Some("/home/u/.config/ddptop/config.toml".into()),
            ..Default::default()
        };
        assert_eq!(t.badge(), None, "nothing new for a one-machine user");
        let e = t.toggle("gpu-a", 0, false).unwrap_err();
        assert_eq!(
            e,
            "no other nodes: add hosts = [\"gpu-a\", \"OTHER-HOST\"] under [nodes] in /home/u/.config/ddptop/config.toml (docs/multinode.md)"
        );
        assert!(!t.all && !e.contains('\n'));
    }

    #[test]
    fn a_broken_table_queued_launches_and_simulation_refuse_in_one_line() {
        let mut t = three(false);
        t.broken = Some("config error: c.toml:3:9: [nodes] listen = \"x\" is not IP:PORT".into());
        let e = t.toggle("gpu-a", 0, false).unwrap_err();
        assert!(
            e.starts_with("all nodes unavailable: config error: c.toml:3:9"),
            "{e}"
        );
        assert_eq!(t.badge().as_deref(), Some("nodes: config error"));
        assert!(!t.all);

        let mut t = three(false);
        let e = t.toggle("gpu-a", 2, false).unwrap_err();
        assert!(
            e.contains("2 queued launch(es) planned for this node"),
            "{e}"
        );
        assert!(!t.all);

        let e = t.toggle("gpu-a", 0, true).unwrap_err();
        assert!(
            e.contains("simulated backend runs on this machine only"),
            "{e}"
        );
        assert!(!t.all);
    }
}
