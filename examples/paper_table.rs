//! Prints the README's comparison with the COPUS paper: both speedups of `optimal-joint` for
//! every shipped session under both objectives, from the same report `copus plan --json`
//! prints. `scripts/paper_table.sh` splices it into README.md:
//! `cargo run --example paper_table`.

use copus::pipeline::plan_session;
use copus::plan::{Objective, paper_table};
use copus::session::{DataSource, Session};
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir("sessions")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        let session = Session::load(&file)?;
        if matches!(session.source, DataSource::Live { .. }) {
            continue; // a live session has no trajectory to plan ahead of time
        }
        let name = file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        for objective in [Objective::McCandlish, Objective::LrSqrt] {
            let mut r = session.clone().resolve(Path::new(&file))?;
            r.session.planner.objective = objective;
            let report =
                plan_session(&r).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            rows.push(paper_table::row(&name, &report));
        }
    }
    print!("{}", paper_table::render_markdown(&rows));
    Ok(())
}
