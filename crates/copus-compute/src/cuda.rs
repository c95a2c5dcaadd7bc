//! The CUDA backend (feature `cuda`, on by default): kernels from `kernels/reduce.cu` compiled with NVRTC,
//! two pinned staging buffers on two streams so that staging one range on the host overlaps
//! the copy and reduction of the previous one, f64 partials per block summed on the host in a
//! fixed order. The EMA state lives on the device.

use super::ema::EmaStorage;
use super::staging::{
    self, SLOT_F64, STAGE_BYTES, THREADS, blocks, lane_of, part_stride_bytes, slot_of,
};
use super::{Backend, ComputeError, DType, EmaParams, EmaState, Segment, Sums, kernels, validate};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};
use std::sync::{Arc, Mutex};

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> ComputeError + '_ {
    move |e| ComputeError::Cuda(format!("{what}: {e:?}"))
}

/// One staging lane: pinned host buffer, device buffer, stream, copy-done event.
struct Lane {
    stream: Arc<CudaStream>,
    pinned: PinnedHostSlice<u8>,
    dev: CudaSlice<u8>,
    copied: Option<CudaEvent>,
}

struct Inner {
    lanes: [Lane; 2],
    dummy: CudaSlice<f32>,
}

// SAFETY: the pinned buffers are plain host memory owned by this struct; every access goes
// through the backend's Mutex, and each lane's buffers are only used on that lane's stream.
unsafe impl Send for Inner {}

/// CUDA reduction on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    funcs: [CudaFunction; 3],
    inner: Mutex<Inner>,
    name: String,
}

impl CudaBackend {
    /// Open device `ordinal`, compile the kernels and allocate the staging buffers. Call
    /// [`super::device::probe_cuda`] first: cudarc panics when a library is missing.
    pub fn new(ordinal: usize) -> Result<Self, ComputeError> {
        let ctx = CudaContext::new(ordinal).map_err(cuda_err("open device"))?;
        // SAFETY: all cross-stream ordering is explicit below (events and stream syncs).
        unsafe { ctx.disable_event_tracking() };
        let (src_name, src, _) = kernels::KERNELS[0];
        let ptx = kernels::compile(src_name, src)?;
        let module = ctx.load_module(ptx).map_err(cuda_err("load module"))?;
        let f = |n: &str| module.load_function(n).map_err(cuda_err("load function"));
        let funcs = [
            f("copus_reduce_f32")?,
            f("copus_reduce_f16")?,
            f("copus_reduce_bf16")?,
        ];
        let lane = || -> Result<Lane, ComputeError> {
            let stream = ctx.new_stream().map_err(cuda_err("stream"))?;
            // SAFETY: the buffer is fully written before any read of it (it is only copied
            // from after being filled).
            let pinned =
                unsafe { ctx.alloc_pinned::<u8>(STAGE_BYTES) }.map_err(cuda_err("pinned"))?;
            let dev = stream
                .alloc_zeros::<u8>(STAGE_BYTES)
                .map_err(cuda_err("alloc"))?;
            Ok(Lane {
                stream,
                pinned,
                dev,
                copied: None,
            })
        };
        let lanes = [lane()?, lane()?];
        let dummy = lanes[0]
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(cuda_err("alloc"))?;
        let name = format!(
            "cuda:{ordinal} {}",
            ctx.name().unwrap_or_else(|_| "unknown GPU".into())
        );
        Ok(CudaBackend {
            ctx,
            funcs,
            inner: Mutex::new(Inner { lanes, dummy }),
            name,
        })
    }
}

impl CudaBackend {
    /// Seconds to copy `bytes` from pinned host memory to the device in staging-buffer chunks
    /// on both lanes: the host-to-device transfer every reduction pays, so the bound that
    /// `copus bench` sets the reduction beside.
    pub fn time_host_to_device(&self, bytes: usize) -> Result<f64, ComputeError> {
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| ComputeError::Cuda("backend poisoned".into()))?;
        let inner = &mut *guard;
        for lane in inner.lanes.iter_mut() {
            if let Some(ev) = lane.copied.take() {
                ev.synchronize().map_err(cuda_err("wait for staging"))?;
            }
            lane.stream.synchronize().map_err(cuda_err("synchronize"))?;
        }
        let start = std::time::Instant::now();
        let (mut left, mut j) = (bytes, 0usize);
        while left > 0 {
            let n = left.min(STAGE_BYTES);
            let lane = &mut inner.lanes[lane_of(j)];
            let host = lane.pinned.as_slice().map_err(cuda_err("pinned"))?;
            let (dptr, _sync) = lane.dev.device_ptr(&lane.stream);
            // SAFETY: `host` is pinned and only read; `dev` holds STAGE_BYTES ≥ n; both lanes
            // are synchronised before the buffers are used again.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(dptr, &host[..n], lane.stream.cu_stream())
            }
            .map_err(cuda_err("copy to device"))?;
            left -= n;
            j += 1;
        }
        for lane in inner.lanes.iter() {
            lane.stream.synchronize().map_err(cuda_err("synchronize"))?;
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Seconds to copy `bytes` from one device buffer to another in staging-buffer chunks
    /// (each byte read and written once in device memory): the device's own copy bandwidth,
    /// the roofline of the reduction kernel once data is on the device.
    pub fn time_device_to_device(&self, bytes: usize) -> Result<f64, ComputeError> {
        let guard = self
            .inner
            .lock()
            .map_err(|_| ComputeError::Cuda("backend poisoned".into()))?;
        let [a, b] = &guard.lanes;
        for lane in [a, b] {
            lane.stream.synchronize().map_err(cuda_err("synchronize"))?;
        }
        let stream = &a.stream;
        let start = std::time::Instant::now();
        let mut left = bytes;
        while left > 0 {
            let n = left.min(STAGE_BYTES);
            let (src, _s) = a.dev.device_ptr(stream);
            let (dst, _d) = b.dev.device_ptr(stream);
            // SAFETY: both device buffers hold STAGE_BYTES ≥ n; no other work uses them
            // while the backend's lock is held, and the stream is synchronised below.
            unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, n, stream.cu_stream()) }
                .map_err(cuda_err("device copy"))?;
            left -= n;
        }
        stream.synchronize().map_err(cuda_err("synchronize"))?;
        Ok(start.elapsed().as_secs_f64())
    }
}

/// Cut the batch into launches that fit one staging buffer (see [`staging::plan`]).
fn plan(segments: &[Segment<'_>], k: usize) -> Result<Vec<staging::Job>, ComputeError> {
    let lens: Vec<(usize, usize)> = segments.iter().map(|s| (s.len(), s.dtype.size())).collect();
    staging::plan(&lens, k).map_err(ComputeError::Invalid)
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn reduce(
        &self,
        segments: &[Segment<'_>],
        weights: &[f64],
        mut ema: Option<(&mut EmaState, EmaParams)>,
    ) -> Result<Vec<Sums>, ComputeError> {
        validate(segments, weights)?;
        let k = weights.len();
        let jobs = plan(segments, k)?;
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| ComputeError::Cuda("backend poisoned".into()))?;
        let inner = &mut *guard;
        let per_lane = staging::per_lane(jobs.len());
        let mut outs = Vec::with_capacity(2);
        let mut ws = Vec::with_capacity(2);
        for (lane, &n) in inner.lanes.iter().zip(&per_lane) {
            outs.push(
                lane.stream
                    .alloc_zeros::<f64>((n * SLOT_F64).max(4))
                    .map_err(cuda_err("alloc"))?,
            );
            ws.push(
                lane.stream
                    .clone_htod(weights)
                    .map_err(cuda_err("upload weights"))?,
            );
        }
        for (j, job) in jobs.iter().enumerate() {
            let li = lane_of(j);
            let seg = &segments[job.seg];
            let size = seg.dtype.size();
            let n = job.hi - job.lo;
            let stride_bytes = part_stride_bytes(n, size);
            let lane = &mut inner.lanes[li];
            if let Some(ev) = lane.copied.take() {
                ev.synchronize().map_err(cuda_err("wait for staging"))?;
            }
            let host = lane.pinned.as_mut_slice().map_err(cuda_err("pinned"))?;
            let total = k * stride_bytes;
            staging::stage(
                &mut host[..total],
                &seg.parts,
                job.lo * size..job.hi * size,
                stride_bytes,
            );
            {
                let (dptr, _sync) = lane.dev.device_ptr(&lane.stream);
                // SAFETY: `host` is pinned and not touched again until `copied` completes;
                // `dev` holds STAGE_BYTES ≥ total.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        dptr,
                        &host[..total],
                        lane.stream.cu_stream(),
                    )
                }
                .map_err(cuda_err("copy to device"))?;
            }
            lane.copied = Some(lane.stream.record_event(None).map_err(cuda_err("event"))?);
            let blocks = blocks(n);
            let slot = slot_of(j);
            let mut out = outs[li].slice_mut(slot..slot + SLOT_F64);
            let stride = (stride_bytes / size) as u64;
            let (k_i, n_u) = (k as i32, n as u64);
            let (decay, mode) = match &ema {
                Some((_, p)) => (p.decay, if p.first { 1i32 } else { 2 }),
                None => (0.0, 0),
            };
            let func = &self.funcs[match seg.dtype {
                DType::F32 => 0,
                DType::F16 => 1,
                DType::BF16 => 2,
            }];
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = lane.stream.launch_builder(func);
            b.arg(&lane.dev)
                .arg(&stride)
                .arg(&k_i)
                .arg(&n_u)
                .arg(&ws[li])
                .arg(&mut out);
            let (mut mv, mut sv);
            match ema.as_mut() {
                Some((state, _)) => {
                    let EmaStorage::Device { mean, sq } = &mut state.storage else {
                        return Err(ComputeError::Invalid(
                            "EMA state was created by another backend".into(),
                        ));
                    };
                    let at = seg.offset + job.lo;
                    if at + n > state.len {
                        return Err(ComputeError::Invalid("segment leaves the EMA state".into()));
                    }
                    mv = mean.slice_mut(at..at + n);
                    sv = sq.slice_mut(at..at + n);
                    b.arg(&mut mv).arg(&mut sv);
                }
                None => {
                    b.arg(&inner.dummy).arg(&inner.dummy);
                }
            }
            b.arg(&decay).arg(&mode);
            // SAFETY: argument types match the kernel signature in kernels/reduce.cu; every
            // index the kernel touches is below n, inside each buffer.
            unsafe { b.launch(cfg) }.map_err(cuda_err("launch"))?;
        }
        let mut host_outs = Vec::with_capacity(2);
        for (lane, out) in inner.lanes.iter().zip(&outs) {
            lane.stream.synchronize().map_err(cuda_err("synchronize"))?;
            host_outs.push(
                lane.stream
                    .clone_dtoh(out)
                    .map_err(cuda_err("copy partials"))?,
            );
        }
        let mut sums = vec![Sums::default(); segments.len()];
        for (j, job) in jobs.iter().enumerate() {
            let slot = slot_of(j);
            for p in host_outs[lane_of(j)][slot..slot + SLOT_F64].chunks_exact(4) {
                let s = Sums {
                    sq_parts: p[0],
                    sq_big: p[1],
                    ema_noise: p[2],
                    ema_signal: p[3],
                };
                sums[job.seg] = sums[job.seg] + s;
            }
        }
        Ok(sums)
    }

    fn preferred_segment_elems(&self) -> usize {
        4 << 20
    }

    fn preferred_wave_bytes(&self) -> usize {
        // Eight staging buffers per call: the two lanes alternate, so the host stages one
        // launch while the other lane's copy and kernel run; one synchronisation per 512 MiB.
        8 * STAGE_BYTES
    }

    fn copy_baselines(&self, bytes: usize) -> Vec<(String, Result<f64, ComputeError>)> {
        vec![
            (
                "host->device copy, pinned".into(),
                self.time_host_to_device(bytes),
            ),
            (
                "device->device copy".into(),
                self.time_device_to_device(bytes),
            ),
        ]
    }

    fn new_ema_state(&self, len: usize) -> Result<EmaState, ComputeError> {
        let stream = self.ctx.default_stream();
        let mean = stream
            .alloc_zeros::<f32>(len.max(1))
            .map_err(cuda_err("alloc EMA"))?;
        let sq = stream
            .alloc_zeros::<f32>(len.max(1))
            .map_err(cuda_err("alloc EMA"))?;
        stream.synchronize().map_err(cuda_err("synchronize"))?;
        Ok(EmaState {
            len,
            storage: EmaStorage::Device { mean, sq },
        })
    }
}
