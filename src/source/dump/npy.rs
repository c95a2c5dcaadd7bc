//! The .npy layout: `step_<N>/<part>/<tensor name>.npy`, one directory per gradient set, with
//! the sample count in `<part>/samples.txt` (a decimal number). Dtypes `<f4` (F32) and `<f2`
//! (F16); numpy has no bfloat16, use safetensors for BF16. Format versions 1, 2 and 3.

use super::error::{DumpError, io};
use super::index::{GradFile, TensorEntry};
use super::st_file::parse_samples;
use crate::compute::DType;
use std::io::Read;
use std::path::Path;

/// File in a part directory that holds its sample count.
pub const SAMPLES_FILE: &str = "samples.txt";

/// Read every `*.npy` header of one part directory. Tensors come sorted by name.
pub fn read_part_dir(dir: &Path) -> Result<GradFile, DumpError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "npy"))
        .collect();
    files.sort();
    for p in &files {
        super::scan::regular_file(p)?;
    }
    let tensors = files
        .iter()
        .map(|p| read_header(p))
        .collect::<Result<Vec<_>, _>>()?;
    let sp = dir.join(SAMPLES_FILE);
    let samples = match read_small(&sp) {
        // A byte-order mark (Notepad, PowerShell) is no part of the number, as in stats files.
        Ok(s) => Some(parse_samples(
            &sp,
            s.strip_prefix('\u{feff}').unwrap_or(&s),
        )?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(&sp)(e)),
    };
    Ok(GradFile {
        path: dir.into(),
        samples,
        tensors,
    })
}

/// Parse one .npy header; the tensor is named after the file stem.
pub fn read_header(path: &Path) -> Result<TensorEntry, DumpError> {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bad = |m: &str| DumpError::Header {
        path: path.into(),
        message: format!("tensor {name}: {m}"),
    };
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let have = f.metadata().map_err(io(path))?.len();
    let mut pre = [0u8; 12];
    let got = read_up_to(&mut f, &mut pre).map_err(io(path))?;
    if got < 10 || &pre[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (bad magic)"));
    }
    let (hlen, start) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as u64, 10u64),
        2 | 3 if got == 12 => (
            u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as u64,
            12,
        ),
        v => return Err(bad(&format!("unsupported .npy version {v}"))),
    };
    if start + hlen > have {
        return Err(DumpError::Truncated {
            path: path.into(),
            tensor: Some(name),
            need: start + hlen,
            have,
        });
    }
    let mut header = vec![0u8; hlen as usize];
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(start)).map_err(io(path))?;
    f.read_exact(&mut header).map_err(io(path))?;
    let header = String::from_utf8_lossy(&header);
    let descr = dict_value(&header, "descr").ok_or_else(|| bad("no 'descr' in header"))?;
    let descr = quoted(descr).ok_or_else(|| bad("bad 'descr'"))?;
    let dtype = match descr {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        other => {
            return Err(DumpError::UnknownDtype {
                path: path.into(),
                tensor: name,
                dtype: other.into(),
            });
        }
    };
    let fortran = dict_value(&header, "fortran_order").is_some_and(|v| v.starts_with("True"));
    let shape_txt = dict_value(&header, "shape").ok_or_else(|| bad("no 'shape' in header"))?;
    let inner = shape_txt.trim_start_matches('(');
    let inner = &inner[..inner.find(')').ok_or_else(|| bad("bad 'shape'"))?];
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad(&format!("bad dimension {s:?} in 'shape'")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let elems = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
        .ok_or_else(|| bad("shape overflows"))?;
    let nbytes = elems
        .checked_mul(dtype.size() as u64)
        .ok_or_else(|| bad("shape × dtype size overflows 64 bits"))?;
    let offset = start + hlen;
    let need = offset
        .checked_add(nbytes)
        .ok_or_else(|| bad("shape × dtype size overflows 64 bits"))?;
    if usize::try_from(elems).is_err() || usize::try_from(need).is_err() {
        return Err(bad("tensor too large for this machine's address space"));
    }
    if need > have {
        return Err(DumpError::Truncated {
            path: path.into(),
            tensor: Some(name),
            need,
            have,
        });
    }
    // numpy writes the header and the data, nothing after: more bytes mean a shape that
    // does not describe the data (half a tensor was read without a word).
    if have > need {
        return Err(bad(&format!(
            "{} bytes after the data its header's shape {shape:?} describes ({nbytes} bytes): \
             the shape does not match the data",
            have - need
        )));
    }
    Ok(TensorEntry {
        name,
        dtype,
        shape,
        fortran,
        file: path.into(),
        offset,
        nbytes,
    })
}

/// The text after `'key':` in a numpy header dict (up to the end of the header).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest[rest.find(':')? + 1..].trim_start())
}

/// The quoted string at the start of `s` ('<f4' or "<f4").
fn quoted(s: &str) -> Option<&str> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &s[1..];
    Some(&rest[..rest.find(q)?])
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// Longest `samples.txt` read (a number and some whitespace).
const SAMPLES_MAX_BYTES: u64 = 4096;

/// Read a short text file, refusing one that is not a regular file or is longer than
/// [`SAMPLES_MAX_BYTES`] (a FIFO or `/dev/zero` behind a symlink must not hang or fill memory).
fn read_small(p: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(p)?;
    if !meta.is_file() || meta.len() > SAMPLES_MAX_BYTES {
        return Err(std::io::Error::other(format!(
            "not a regular file of at most {SAMPLES_MAX_BYTES} bytes"
        )));
    }
    let mut s = String::new();
    std::fs::File::open(p)?
        .take(SAMPLES_MAX_BYTES)
        .read_to_string(&mut s)?;
    Ok(s)
}
