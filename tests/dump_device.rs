//! Device selection: `cpu` always works; `auto` never fails and explains a CPU fallback;
//! `cuda` without a usable GPU is an error, not a panic.

use copus::compute::{Device, select};

#[test]
fn cpu_is_always_available() {
    let s = select(Device::Cpu).expect("cpu");
    assert!(s.backend.name().starts_with("cpu"));
    assert!(s.note.is_none());
}

#[test]
fn auto_falls_back_to_the_cpu_with_a_note_or_uses_cuda() {
    let s = select(Device::Auto).expect("auto never fails");
    if s.backend.name().starts_with("cpu") {
        let note = s.note.expect("a CPU fallback must say why");
        assert!(
            note.contains("CPU")
                && (note.contains("CUDA") || note.contains("cuda") || note.contains("NVRTC")),
            "{note}"
        );
    } else {
        assert!(s.backend.name().starts_with("cuda"));
    }
}

#[test]
fn cuda_without_a_gpu_is_an_error_not_a_panic() {
    match select(Device::Cuda) {
        Ok(s) => assert!(s.backend.name().starts_with("cuda")),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
