//! Every kernel in `kernels/*.cu` compiles with NVRTC and exports its entry points. Needs the
//! `cuda` feature and an NVRTC library on the loader path (`scripts/ci_nvrtc.sh` installs one
//! from PyPI); without NVRTC the test prints a visible skip. No GPU is needed.
#![cfg(feature = "cuda")]

use copus::compute::device::nvrtc_present;
use copus::compute::kernels::{KERNELS, compile};

#[test]
fn every_kernel_compiles_with_nvrtc() {
    if !nvrtc_present() {
        eprintln!(
            "SKIPPED kernels_compile: NVRTC library (libnvrtc.so.13) not found on the loader path"
        );
        return;
    }
    let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels"))
        .expect("kernels/")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cu"))
        .count();
    assert_eq!(
        on_disk,
        KERNELS.len(),
        "every kernels/*.cu must be listed in compute::kernels::KERNELS"
    );
    for (name, src, entries) in KERNELS {
        let ptx = compile(name, src).unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for entry in *entries {
            assert!(
                text.contains(&format!(".entry {entry}")),
                "kernels/{name}: no entry point {entry} in the PTX"
            );
        }
        eprintln!(
            "COMPILED kernels/{name}: {} bytes of PTX, entries {entries:?}",
            text.len()
        );
    }
}
