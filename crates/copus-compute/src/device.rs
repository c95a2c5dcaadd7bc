//! Device selection (`--device auto|cpu|cuda`) and the report of which backends are compiled
//! in and usable here (`copus --version`, `copus bench --devices`).
//!
//! The CUDA probe looks for the driver library and NVRTC under the names cudarc tries, in its
//! order (so the library it names is the one cudarc will load: `libcuda.so.1`,
//! `libnvrtc.so.13` or `libnvrtc.so.12`, ...), asks each for its CUDA version, counts the
//! devices, and never panics (cudarc panics when a library is missing, so presence is checked
//! first and the rest runs under `catch_unwind`). It runs once per process; its facts are
//! judged by [`CudaProbe::verdict`], a pure function with unit tests. `auto` falls back to the
//! CPU with a note ("CPU (no CUDA driver found)") that the caller shows where the user looks.

use super::{Backend, ComputeError, CpuBackend};
use serde::Serialize;
use std::sync::OnceLock;

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// CUDA when a driver, NVRTC and a GPU are present, else the CPU (with a note).
    #[default]
    Auto,
    /// The CPU backend (rayon).
    Cpu,
    /// The CUDA backend; an error when it cannot start.
    Cuda,
}

/// The chosen backend and, when `auto` fell back to the CPU, why (a line to show the user).
pub struct Selected {
    /// The backend to reduce with.
    pub backend: Box<dyn Backend>,
    /// A visible note, e.g. "CPU (no CUDA driver found)".
    pub note: Option<String>,
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selected")
            .field("backend", &self.backend.name())
            .field("note", &self.note)
            .finish()
    }
}

/// Pick a backend for `device`. Only `Device::Cuda` can fail.
pub fn select(device: Device) -> Result<Selected, ComputeError> {
    match device {
        Device::Cpu => Ok(cpu(None)),
        Device::Cuda => Ok(Selected {
            backend: cuda_backend()?,
            note: None,
        }),
        Device::Auto => match cuda_backend() {
            Ok(backend) => Ok(Selected {
                backend,
                note: None,
            }),
            Err(e) => Ok(cpu(Some(fallback_note(&e)))),
        },
    }
}

/// What `device` would resolve to, without building a backend (no kernel compilation, no
/// allocation): `Ok(None)` when it can be used as asked, `Ok(Some(note))` when `auto` will
/// fall back to the CPU, `Err` when `cuda` was asked for and cannot run. Cheap after the
/// first call (the probe is cached).
pub fn check(device: Device) -> Result<Option<String>, ComputeError> {
    match device {
        Device::Cpu => Ok(None),
        Device::Cuda => cuda_probe()
            .verdict()
            .map(|_| None)
            .map_err(ComputeError::Cuda),
        Device::Auto => Ok(cuda_probe()
            .verdict()
            .err()
            .map(|why| fallback_note(&ComputeError::Cuda(why)))),
    }
}

/// The note shown when `auto` falls back to the CPU: "CPU (no CUDA driver found)".
pub fn fallback_note(e: &ComputeError) -> String {
    match e {
        ComputeError::Cuda(why) => format!("CPU ({why})"),
        other => format!("CPU ({other})"),
    }
}

fn cpu(note: Option<String>) -> Selected {
    Selected {
        backend: Box::new(CpuBackend::new()),
        note,
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_backend() -> Result<Box<dyn Backend>, ComputeError> {
    cuda_probe().verdict().map_err(ComputeError::Cuda)?;
    Err(ComputeError::Cuda(NOT_COMPILED.into()))
}

#[cfg(feature = "cuda")]
fn cuda_backend() -> Result<Box<dyn Backend>, ComputeError> {
    cuda_probe().verdict().map_err(ComputeError::Cuda)?;
    // cudarc panics on a missing symbol (an old driver): never let that take the process down.
    match std::panic::catch_unwind(|| super::cuda::CudaBackend::new(0)) {
        Ok(r) => Ok(Box::new(r?)),
        Err(_) => Err(ComputeError::Cuda(
            "the CUDA backend panicked while starting (driver too old for the CUDA 13 API?)".into(),
        )),
    }
}

/// Why the CUDA backend is absent from a build without the `cuda` feature.
pub const NOT_COMPILED: &str = "this copus was built without the `cuda` feature";

/// One shared library of the CUDA stack, as found on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibInfo {
    /// The name that loaded, among the ones cudarc tries (e.g. "libnvrtc.so.13").
    pub name: String,
    /// The file the dynamic loader resolved it to, when known.
    pub path: Option<String>,
    /// The CUDA version the library reports, (major, minor).
    pub version: Option<(i32, i32)>,
}

impl LibInfo {
    /// "13.0 (libnvrtc.so.13 at /usr/lib/...)" or "libcuda.so.1" when the version is unknown.
    pub fn describe(&self) -> String {
        let at = self
            .path
            .as_deref()
            .filter(|p| *p != self.name)
            .map(|p| format!(" at {p}"))
            .unwrap_or_default();
        match self.version {
            Some((a, b)) => format!("{a}.{b} ({}{at})", self.name),
            None => format!("{}{at}", self.name),
        }
    }
}

/// Facts about the CUDA stack on this machine; [`CudaProbe::verdict`] judges them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaProbe {
    /// Whether this binary has the CUDA backend (cargo feature `cuda`, on by default).
    pub compiled: bool,
    /// The CUDA version of the API the backend was built against (cudarc's feature).
    pub api: Option<(i32, i32)>,
    /// The driver library (`libcuda.so`), when one loaded; its version is the newest CUDA the
    /// driver supports.
    pub driver: Option<LibInfo>,
    /// NVRTC, when one loaded.
    pub nvrtc: Option<LibInfo>,
    /// The NVRTC names tried, in order (to say what was looked for).
    pub nvrtc_tried: Vec<String>,
    /// Names of the visible devices, or why the driver could not list them (`None` when the
    /// driver was not found).
    pub devices: Option<Result<Vec<String>, String>>,
}

impl CudaProbe {
    /// The probe of a build without the `cuda` feature.
    pub fn not_compiled() -> Self {
        CudaProbe {
            compiled: false,
            api: None,
            driver: None,
            nvrtc: None,
            nvrtc_tried: Vec::new(),
            devices: None,
        }
    }

    /// `Ok(summary)` when the CUDA backend can start here ("cuda:0 NVIDIA H200; driver 13.0
    /// (libcuda.so.1), NVRTC 13.0 (libnvrtc.so.13)"), else `Err(why not)` in words a user can
    /// act on ("no CUDA driver found").
    pub fn verdict(&self) -> Result<String, String> {
        if !self.compiled {
            return Err(NOT_COMPILED.into());
        }
        let Some(driver) = &self.driver else {
            return Err("no CUDA driver found".into());
        };
        let names = match &self.devices {
            None => return Err("no CUDA driver found".into()),
            Some(Err(e)) => {
                return Err(format!(
                    "CUDA driver {} found but unusable: {e}",
                    driver.describe()
                ));
            }
            Some(Ok(n)) if n.is_empty() => {
                return Err(format!(
                    "CUDA driver {} found but no CUDA device is visible",
                    driver.describe()
                ));
            }
            Some(Ok(n)) => n,
        };
        let Some(nvrtc) = &self.nvrtc else {
            let tried = short_list(&self.nvrtc_tried);
            return Err(format!(
                "a CUDA device is present but no NVRTC library was found (tried {tried}); \
                 install the CUDA toolkit's NVRTC or `pip install nvidia-cuda-nvrtc` and put \
                 its lib directory on LD_LIBRARY_PATH"
            ));
        };
        if let (Some(n), Some(d)) = (nvrtc.version, driver.version)
            && n > d
        {
            return Err(format!(
                "NVRTC {}.{} is newer than the CUDA {}.{} the driver supports: the kernels it \
                 compiles would not load; use the NVRTC of CUDA {}.x or update the driver",
                n.0, n.1, d.0, d.1, d.0
            ));
        }
        let devices = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("cuda:{i} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(format!(
            "{devices}; driver {}, NVRTC {}",
            driver.describe(),
            nvrtc.describe()
        ))
    }
}

/// The first few names of a list, then "…".
fn short_list(names: &[String]) -> String {
    let mut shown: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.contains(".so"))
        .collect();
    if shown.is_empty() {
        shown = names.iter().map(String::as_str).collect();
    }
    let more = shown.len() > 4;
    shown.truncate(4);
    let mut s = shown.join(", ");
    if more {
        s.push_str(", …");
    }
    if s.is_empty() { "nothing".into() } else { s }
}

/// The probe of this process's CUDA stack (run once, then cached).
pub fn cuda_probe() -> &'static CudaProbe {
    static PROBE: OnceLock<CudaProbe> = OnceLock::new();
    PROBE.get_or_init(run_probe)
}

#[cfg(not(feature = "cuda"))]
fn run_probe() -> CudaProbe {
    CudaProbe::not_compiled()
}

#[cfg(feature = "cuda")]
fn run_probe() -> CudaProbe {
    use std::panic::catch_unwind;
    let api = Some(CUDA_API);
    let (driver, _) = find_lib(&["cuda", "nvcuda"], c"cuDriverGetVersion");
    let (nvrtc, nvrtc_tried) = find_lib(&["nvrtc"], c"nvrtcVersion");
    let driver = driver.map(|mut d| {
        d.version = catch_unwind(|| {
            let mut v = 0i32;
            // SAFETY: the library is present (checked above); writes one int.
            let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
            (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some((v / 1000, v % 1000 / 10))
        })
        .ok()
        .flatten();
        d
    });
    let nvrtc = nvrtc.map(|mut n| {
        n.version = catch_unwind(|| {
            let (mut a, mut b) = (0i32, 0i32);
            // SAFETY: the library is present (checked above); writes two ints.
            let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) };
            (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((a, b))
        })
        .ok()
        .flatten();
        n
    });
    let devices = driver.as_ref().map(|_| {
        use cudarc::driver::result;
        catch_unwind(|| -> Result<Vec<String>, String> {
            result::init().map_err(|e| format!("{e:?}"))?;
            let n = result::device::get_count().map_err(|e| format!("{e:?}"))?;
            (0..n)
                .map(|i| {
                    let d = result::device::get(i).map_err(|e| format!("{e:?}"))?;
                    result::device::get_name(d).map_err(|e| format!("{e:?}"))
                })
                .collect()
        })
        .unwrap_or_else(|_| Err("the driver library is unusable".into()))
    });
    CudaProbe {
        compiled: true,
        api,
        driver,
        nvrtc,
        nvrtc_tried,
        devices,
    }
}

/// The CUDA API version the backend's bindings were built for: cudarc's `cuda-13000` feature
/// in Cargo.toml (keep the two in step).
#[cfg(feature = "cuda")]
pub const CUDA_API: (i32, i32) = (13, 0);

/// Find a library the way cudarc does (its candidate names, first that loads wins) and where
/// the dynamic loader found it (from the address of `symbol`).
#[cfg(feature = "cuda")]
fn find_lib(stems: &[&str], symbol: &std::ffi::CStr) -> (Option<LibInfo>, Vec<String>) {
    let tried: Vec<String> = stems
        .iter()
        .flat_map(|s| cudarc::get_lib_name_candidates(s))
        .collect();
    for name in &tried {
        if let Some(path) = dl_probe(name, symbol) {
            return (
                Some(LibInfo {
                    name: name.clone(),
                    path,
                    version: None,
                }),
                tried,
            );
        }
    }
    (None, tried)
}

/// `Some(path)` when `name` loads (`path` is where, when the loader says), `None` otherwise.
#[cfg(all(feature = "cuda", unix))]
fn dl_probe(name: &str, symbol: &std::ffi::CStr) -> Option<Option<String>> {
    let cname = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlopen/dlsym/dladdr/dlclose on a library name; the handle is closed before
    // returning and no code from the library is run (its initialisers aside, as cudarc's own
    // presence check does).
    unsafe {
        let h = libc::dlopen(cname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return None;
        }
        let sym = libc::dlsym(h, symbol.as_ptr());
        let mut path = None;
        if !sym.is_null() {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(sym, &mut info) != 0 && !info.dli_fname.is_null() {
                path = Some(
                    std::ffi::CStr::from_ptr(info.dli_fname)
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
        libc::dlclose(h);
        Some(path)
    }
}

#[cfg(all(feature = "cuda", not(unix)))]
fn dl_probe(name: &str, _symbol: &std::ffi::CStr) -> Option<Option<String>> {
    let _ = name;
    None
}

/// True when the NVRTC library can be loaded (cudarc's own candidate names, e.g.
/// `libnvrtc.so.13` or `libnvrtc.so.12`). Never panics.
#[cfg(feature = "cuda")]
pub fn nvrtc_present() -> bool {
    cuda_probe().nvrtc.is_some()
}

/// Check the driver library, NVRTC and that at least one GPU is visible. Never panics.
pub fn probe_cuda() -> Result<(), ComputeError> {
    cuda_probe().verdict().map(drop).map_err(ComputeError::Cuda)
}

/// One compute backend in a report: compiled in or not, usable here or why not.
#[derive(Debug, Clone, Serialize)]
pub struct BackendStatus {
    /// "cpu" or "cuda".
    pub name: &'static str,
    /// Whether this binary has it.
    pub compiled: bool,
    /// Whether it can run on this machine.
    pub usable: bool,
    /// What it would run on, or why it cannot.
    pub detail: String,
}

/// Every backend this build knows of and whether each is usable here, plus what `--device
/// auto` picks ("CUDA (cuda:0 …)" or "CPU (no CUDA driver found)").
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// cpu, then cuda.
    pub backends: Vec<BackendStatus>,
    /// What `--device auto` uses here, in words.
    pub auto: String,
    /// The raw CUDA probe.
    pub cuda_probe: CudaProbe,
}

/// The report for this machine (runs the cached probe).
pub fn backend_report() -> BackendReport {
    report_from(cuda_probe(), &CpuBackend::new().name())
}

/// The report from a probe's facts (pure; `cpu_name` is the CPU backend's name).
pub fn report_from(probe: &CudaProbe, cpu_name: &str) -> BackendReport {
    let verdict = probe.verdict();
    // What was found of a stack that cannot run (e.g. NVRTC from a pip wheel, no driver).
    let found = match (&probe.driver, &probe.nvrtc) {
        (None, Some(n)) => format!("; NVRTC {} found", n.describe()),
        _ => String::new(),
    };
    let cuda_detail = match (&verdict, probe.api) {
        (Ok(s), _) => s.clone(),
        (Err(why), _) if !probe.compiled => why.clone(),
        (Err(why), Some((a, b))) => {
            format!("{why}{found} (built for the CUDA {a}.{b} API, loads libraries at run time)")
        }
        (Err(why), None) => format!("{why}{found}"),
    };
    let auto = match &verdict {
        Ok(s) => format!("CUDA ({s})"),
        Err(why) => format!("CPU ({why})"),
    };
    BackendReport {
        backends: vec![
            BackendStatus {
                name: "cpu",
                compiled: true,
                usable: true,
                detail: cpu_name.to_string(),
            },
            BackendStatus {
                name: "cuda",
                compiled: probe.compiled,
                usable: verdict.is_ok(),
                detail: cuda_detail,
            },
        ],
        auto,
        cuda_probe: probe.clone(),
    }
}

impl BackendReport {
    /// The lines `copus --version` and `copus bench --devices` print.
    pub fn render(&self) -> String {
        let mut out = String::from("compute backends:\n");
        for b in &self.backends {
            let state = match (b.compiled, b.usable) {
                (false, _) => "not compiled in",
                (true, true) => "compiled in, usable",
                (true, false) => "compiled in, not usable here",
            };
            out.push_str(&format!("  {:<5} {state}: {}\n", b.name, b.detail));
        }
        out.push_str(&format!("--device auto uses: {}\n", self.auto));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, v: (i32, i32)) -> LibInfo {
        LibInfo {
            name: name.into(),
            path: Some(format!("/usr/lib/x86_64-linux-gnu/{name}")),
            version: Some(v),
        }
    }

    fn full() -> CudaProbe {
        CudaProbe {
            compiled: true,
            api: Some((13, 0)),
            driver: Some(lib("libcuda.so.1", (13, 0))),
            nvrtc: Some(lib("libnvrtc.so.13", (13, 0))),
            nvrtc_tried: vec!["libnvrtc.so".into(), "libnvrtc.so.13".into()],
            devices: Some(Ok(vec!["NVIDIA H200".into()])),
        }
    }

    #[test]
    fn a_complete_stack_is_usable_and_says_what_it_found() {
        let v = full().verdict().expect("usable");
        assert!(v.contains("cuda:0 NVIDIA H200"), "{v}");
        assert!(v.contains("driver 13.0 (libcuda.so.1"), "{v}");
        assert!(v.contains("NVRTC 13.0 (libnvrtc.so.13"), "{v}");
        let r = report_from(&full(), "cpu (2 threads)");
        assert!(r.auto.starts_with("CUDA (cuda:0"), "{}", r.auto);
        assert!(r.backends.iter().all(|b| b.usable));
    }

    #[test]
    fn no_driver_reads_cpu_no_cuda_driver_found() {
        let p = CudaProbe {
            driver: None,
            nvrtc: None,
            devices: None,
            ..full()
        };
        assert_eq!(p.verdict(), Err("no CUDA driver found".into()));
        let r = report_from(&p, "cpu (2 threads)");
        assert_eq!(r.auto, "CPU (no CUDA driver found)");
        let text = r.render();
        assert!(text.contains("cuda  compiled in, not usable here: no CUDA driver found"));
        assert!(text.contains("cpu   compiled in, usable: cpu (2 threads)"));
        assert!(text.contains("--device auto uses: CPU (no CUDA driver found)"));
        assert_eq!(
            fallback_note(&ComputeError::Cuda(p.verdict().unwrap_err())),
            "CPU (no CUDA driver found)"
        );
    }

    #[test]
    fn a_build_without_the_feature_says_so() {
        let p = CudaProbe::not_compiled();
        assert_eq!(p.verdict(), Err(NOT_COMPILED.into()));
        let r = report_from(&p, "cpu (1 threads)");
        assert!(!r.backends[1].compiled);
        assert!(r.render().contains("cuda  not compiled in"));
    }

    #[test]
    fn driver_without_devices_or_broken_is_explained() {
        let none = CudaProbe {
            devices: Some(Ok(vec![])),
            ..full()
        };
        assert!(
            none.verdict()
                .unwrap_err()
                .contains("no CUDA device is visible")
        );
        let broken = CudaProbe {
            devices: Some(Err("CUDA_ERROR_NO_DEVICE".into())),
            ..full()
        };
        let why = broken.verdict().unwrap_err();
        assert!(
            why.contains("unusable: CUDA_ERROR_NO_DEVICE") && why.contains("13.0"),
            "{why}"
        );
    }

    #[test]
    fn missing_nvrtc_names_what_was_tried() {
        let p = CudaProbe {
            nvrtc: None,
            nvrtc_tried: [
                "libnvrtc.so",
                "libnvrtc64.so",
                "libnvrtc.so.13",
                "libnvrtc.so.12",
            ]
            .map(String::from)
            .into(),
            ..full()
        };
        let why = p.verdict().unwrap_err();
        assert!(
            why.contains("no NVRTC library") && why.contains("libnvrtc.so.12"),
            "{why}"
        );
    }

    #[test]
    fn cuda_12_libraries_are_accepted_and_a_newer_nvrtc_than_the_driver_is_refused() {
        let cu12 = CudaProbe {
            driver: Some(lib("libcuda.so.1", (12, 4))),
            nvrtc: Some(lib("libnvrtc.so.12", (12, 4))),
            ..full()
        };
        let v = cu12.verdict().expect("CUDA 12 stack");
        assert!(v.contains("NVRTC 12.4 (libnvrtc.so.12"), "{v}");
        let old_nvrtc_new_driver = CudaProbe {
            driver: Some(lib("libcuda.so.1", (13, 0))),
            nvrtc: Some(lib("libnvrtc.so.12", (12, 8))),
            ..full()
        };
        assert!(old_nvrtc_new_driver.verdict().is_ok());
        let too_new = CudaProbe {
            driver: Some(lib("libcuda.so.1", (12, 4))),
            nvrtc: Some(lib("libnvrtc.so.13", (13, 0))),
            ..full()
        };
        let why = too_new.verdict().unwrap_err();
        assert!(
            why.contains("NVRTC 13.0 is newer than the CUDA 12.4"),
            "{why}"
        );
    }

    #[test]
    fn library_descriptions_show_name_version_and_path() {
        let l = lib("libnvrtc.so.13", (13, 0));
        assert_eq!(
            l.describe(),
            "13.0 (libnvrtc.so.13 at /usr/lib/x86_64-linux-gnu/libnvrtc.so.13)"
        );
        let bare = LibInfo {
            name: "libcuda.so.1".into(),
            path: None,
            version: None,
        };
        assert_eq!(bare.describe(), "libcuda.so.1");
    }

    #[test]
    fn the_probe_of_this_machine_never_panics_and_agrees_with_check() {
        let p = cuda_probe();
        assert_eq!(p.compiled, cfg!(feature = "cuda"));
        match p.verdict() {
            Ok(_) => assert_eq!(check(Device::Auto).expect("auto"), None),
            Err(why) => {
                assert_eq!(
                    check(Device::Auto).expect("auto never fails"),
                    Some(format!("CPU ({why})"))
                );
                assert!(check(Device::Cuda).is_err());
            }
        }
        assert_eq!(check(Device::Cpu).expect("cpu"), None);
    }
}
