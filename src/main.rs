//! `ddptop`: parse the command line and hand it to a front end (the dashboard, `run`, `runs`)
//! or to the simulated worker.

use clap::Parser;
use ddptop::cli::{Cli, Cmd, WorkerCmd};

/// Parse, dispatch, return the process exit code.
fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Cmd::Worker {
            kind: WorkerCmd::Sim(a),
        }) => ddptop::sim::main(a),
        Some(Cmd::Agent(a)) => ddptop::agent::main(a),
        Some(Cmd::Run(a)) => ddptop::util::runtime()
            .and_then(|rt| rt.block_on(ddptop::headless::run(&cli.global, a))),
        Some(Cmd::Attach(a)) => ddptop::util::runtime()
            .and_then(|rt| rt.block_on(ddptop::headless::attach(&cli.global, a))),
        Some(Cmd::Tune(a)) => {
            ddptop::util::runtime().and_then(|rt| rt.block_on(ddptop::tune::tune(&cli.global, a)))
        }
        Some(Cmd::Runs(a)) => ddptop::query::runs(&cli.global, &a),
        Some(Cmd::Report(a)) => ddptop::query::report(&cli.global, &a),
        Some(Cmd::Show(a)) => ddptop::query::show(&cli.global, &a),
        Some(Cmd::Diff(a)) => ddptop::query::diff(&cli.global, &a),
        Some(Cmd::Completions(a)) => ddptop::query::completions(&a),
        Some(Cmd::Man(a)) => ddptop::query::man(&a),
        Some(Cmd::BenchGpu(a)) => ddptop::bench::main(&a),
        None => ddptop::tui::main(&cli.global, &cli.tui),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ddptop: {e:#}");
            ddptop::cli::exit_code(&e)
        }
    };
    std::process::exit(code);
}
