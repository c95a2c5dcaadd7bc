//! End-to-end (tmux): `copus open` on the shipped sample run reads as a drifting run at 80×24
//! without colour (now and drift lead the timeline, the located causes are marked, `l` shows a
//! layer), and `copus open A --compare B` overlays B with where the two differ.

use crate::drift_support;
use crate::tmux_support;

use copus::app::measured_view as mv;
use drift_support::{open, sample_run, write_compared};
use tmux_support::Tmux;

#[test]
fn the_sample_run_reads_as_drifting_and_compares() {
    let app = open(&sample_run(), None).expect("opens");
    let report = app.analysis.clone().expect("analysis");
    // In the unit the timeline's title counts in (sequences of the run's tokens a sample).
    let segs = mv::headline_segments_in(&report, mv::sample_word(app.trajectory.seq_len));
    let layer = mv::layer_names(&report)[0].clone();

    let command = format!(
        "NO_COLOR=1 {} open {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        sample_run().display()
    );
    let tmux = Tmux::start("drift", 80, 24, &command);
    let screen = tmux.wait_for(&segs[0]);
    assert!(
        screen
            .lines()
            .any(|l| l.contains(&format!("{} · {}", segs[0], segs[1]))),
        "now and drift whole on one line at 80 columns:\n{screen}"
    );
    for c in mv::causes(&report, &app.trajectory) {
        assert!(screen.contains(c.kind.glyph()), "{c:?}:\n{screen}");
    }
    tmux.keys(&["l"]);
    tmux.wait_for(&format!("layer {layer}: B_simple"));
    tmux.keys(&["q"]);
    tmux.wait_for("COPUS-EXITED 0");

    let dir = tempfile::tempdir().expect("tempdir");
    let b = write_compared(dir.path());
    let command = format!(
        "{} open {} --compare {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        sample_run().display(),
        b.display()
    );
    let tmux = Tmux::start("drift-compare", 120, 40, &command);
    let screen = tmux.wait_for("+ B run-b.ndjson");
    assert!(screen.contains("B≠A on"), "{screen}");
    assert!(screen.contains('≠'), "{screen}");
    tmux.keys(&["q"]);
    tmux.wait_for("COPUS-EXITED 0");

    // A bad --compare is an error before the terminal is taken over.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["open"])
        .arg(sample_run())
        .arg("--compare")
        .arg(dir.path().join("nope.ndjson"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.ndjson"), "{err}");
}
