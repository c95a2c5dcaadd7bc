// copus gradient-dump reduction kernels, compiled at run time with NVRTC (no CUDA headers).
//
// One launch reduces one element range of one tensor across K files staged back to back in
// device memory (file k at data + k * stride elements). Per element i:
//   small += sum_k x_k^2      big += (sum_k w_k x_k)^2
// accumulated in double, then reduced per block; block b writes 4 doubles to out[4b..4b+4]:
//   {sum_k |g_k|^2, |sum_k w_k g_k|^2, ema_noise, ema_signal}.
// With ema_mode != 0 the seed's temporal EMA state (f32 mean and mean-square, indexed like
// the elements) is advanced with g = sum_k w_k x_k: mode 1 sets it, mode 2 blends with decay.

#define COPUS_BLOCK 256

struct copus_h16 { unsigned short bits; };
struct copus_b16 { unsigned short bits; };

__device__ __forceinline__ double copus_load(const float* p) { return (double)*p; }
__device__ __forceinline__ double copus_load(const copus_h16* p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p->bits));
    return (double)f;
}
__device__ __forceinline__ double copus_load(const copus_b16* p) {
    return (double)__uint_as_float(((unsigned int)p->bits) << 16);
}

template <typename T>
__device__ void copus_reduce(const T* data, unsigned long long stride, int k_parts,
                             unsigned long long n, const double* w, double* out,
                             float* ema_mean, float* ema_sq, double decay, int ema_mode) {
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += step) {
        double b = 0.0;
        for (int k = 0; k < k_parts; ++k) {
            double x = copus_load(data + (unsigned long long)k * stride + i);
            acc[0] += x * x;
            b += w[k] * x;
        }
        acc[1] += b * b;
        if (ema_mode != 0) {
            double m = b, q = b * b;
            if (ema_mode == 2) {
                m = decay * (double)ema_mean[i] + (1.0 - decay) * b;
                q = decay * (double)ema_sq[i] + (1.0 - decay) * b * b;
            }
            float mf = (float)m, qf = (float)q;
            ema_mean[i] = mf;
            ema_sq[i] = qf;
            acc[2] += (double)qf - (double)mf * (double)mf;
            acc[3] += (double)mf * (double)mf;
        }
    }
    __shared__ double sh[4][COPUS_BLOCK];
    for (int j = 0; j < 4; ++j) sh[j][threadIdx.x] = acc[j];
    __syncthreads();
    for (unsigned int s = COPUS_BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            for (int j = 0; j < 4; ++j) sh[j][threadIdx.x] += sh[j][threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (int j = 0; j < 4; ++j) out[4 * blockIdx.x + j] = sh[j][0];
    }
}

#define COPUS_ENTRY(NAME, T)                                                              \
    extern "C" __global__ void NAME(const T* data, unsigned long long stride, int k_parts, \
                                    unsigned long long n, const double* w, double* out,    \
                                    float* ema_mean, float* ema_sq, double decay,          \
                                    int ema_mode) {                                        \
        copus_reduce<T>(data, stride, k_parts, n, w, out, ema_mean, ema_sq, decay,         \
                        ema_mode);                                                         \
    }

COPUS_ENTRY(copus_reduce_f32, float)
COPUS_ENTRY(copus_reduce_f16, copus_h16)
COPUS_ENTRY(copus_reduce_bf16, copus_b16)
