//! The interactive loop (being written).

pub fn main(_g: &crate::cli::GlobalArgs, _a: &crate::cli::TuiArgs) -> anyhow::Result<i32> {
    anyhow::bail!("the dashboard is not wired up yet")
}
