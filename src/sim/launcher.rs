//! The sim launcher: torchrun's process shape without torch.

use super::SimArgs;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

pub fn run(args: &SimArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..args.world_size {
        let mut cmd = Command::new(&exe);
        cmd.args(rank_args(args, rank));
        // Like torchrun's start_new_session=True: ranks are out of the launcher's group, so
        // ddptop must signal them by the pids they report in `hello`.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        children.push(cmd.spawn()?);
    }
    let mut failed: Option<i32> = None;
    let mut alive: Vec<bool> = vec![true; children.len()];
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    while alive.iter().any(|a| *a) {
        for i in 0..children.len() {
            if !alive[i] {
                continue;
            }
            if let Some(st) = children[i].try_wait()? {
                alive[i] = false;
                if !st.success() && failed.is_none() {
                    eprintln!("sim launcher: rank {i} exited with {st}; stopping the others");
                    failed = Some(st.code().unwrap_or(1));
                    for (j, pid) in pids.iter().enumerate() {
                        if alive[j] {
                            unsafe { libc::kill(*pid, libc::SIGTERM) };
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(if failed.is_some() { 1 } else { 0 })
}

fn rank_args(a: &SimArgs, rank: u32) -> Vec<String> {
    let mut v = vec![
        "worker".into(),
        "sim".into(),
        "--profile".into(),
        a.profile.clone(),
        "--experiment".into(),
        a.experiment.to_string(),
        "--world-size".into(),
        a.world_size.to_string(),
        "--rank".into(),
        rank.to_string(),
        "--batch".into(),
        a.batch.to_string(),
        "--epochs".into(),
        a.epochs.to_string(),
        "--samples".into(),
        a.samples.to_string(),
        "--speed".into(),
        a.speed.to_string(),
        "--seed".into(),
        a.seed.to_string(),
    ];
    for e in &a.env {
        v.push("--env".into());
        v.push(e.clone());
    }
    if let Some(f) = &a.inject {
        v.push("--inject".into());
        v.push(f.to_string());
    }
    if let Some(n) = a.noise {
        v.push("--noise".into());
        v.push(n.to_string());
    }
    v
}
