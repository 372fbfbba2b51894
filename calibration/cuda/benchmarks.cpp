// HBM, GEMM and AdamW benchmarks (see benchmarks.hpp): CUDA-event timing inside measure(), correctness checks
// outside the timed loop.
#include "calibration/cuda/benchmarks.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "calibration/adamw_reference.hpp"
#include "calibration/cuda/adamw_kernel.hpp"
#include "calibration/cuda/cuda_check.hpp"
#include "core/units.hpp"

namespace shardplan::calibration::cuda {

namespace {

/// RAII device buffer.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::int64_t bytes) { SP_CUDA(cudaMalloc(&ptr, static_cast<size_t>(bytes))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// Stream and two events; time(fn, iters) enqueues fn iters times between the events and returns seconds.
struct Timer {
  cudaStream_t stream = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  Timer() {
    SP_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SP_CUDA(cudaEventCreate(&a));
    SP_CUDA(cudaEventCreate(&b));
  }
  ~Timer() { cudaEventDestroy(a), cudaEventDestroy(b), cudaStreamDestroy(stream); }
  template <class F>
  double time(F&& enqueue_one, std::int64_t iters) {
    SP_CUDA(cudaEventRecord(a, stream));
    for (std::int64_t i = 0; i < iters; ++i) enqueue_one();
    SP_CUDA(cudaEventRecord(b, stream));
    SP_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    SP_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e-3;
  }
};

std::int64_t free_bytes() {
  size_t f = 0, t = 0;
  SP_CUDA(cudaMemGetInfo(&f, &t));
  return static_cast<std::int64_t>(f);
}

}  // namespace

double device_peak_bf16_flops(std::string* how) {
  int sms = 0, khz = 0, major = 0, minor = 0;
  SP_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  SP_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  SP_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  SP_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  // Dense bf16 tensor-core FLOP per clock per SM: A100 (sm80) 312 TFLOP/s = 108 SMs x 1.41 GHz x 2048;
  // H100 SXM (sm90) 989 TFLOP/s = 132 x 1.83 GHz x 4096; GA10x/AD10x (sm86/sm89) 512; B200 (sm100) ~8192.
  int per_clk = 0;
  if (major == 8 && minor == 0)
    per_clk = 2048;
  else if (major == 8)
    per_clk = 512;
  else if (major == 9)
    per_clk = 4096;
  else if (major == 10)
    per_clk = 8192;
  const std::string cc = "sm" + std::to_string(major) + std::to_string(minor);
  if (per_clk == 0) {
    if (how) *how = cc + ": unknown dense bf16 rate per SM";
    return 0;
  }
  if (how)
    *how = cc + ": " + std::to_string(per_clk) + " FLOP/clk/SM x " + std::to_string(sms) + " SMs x " +
           std::to_string(khz / 1000) + " MHz";
  return static_cast<double>(per_clk) * sms * khz * 1e3;
}

std::vector<GemmShape> gemm_shapes(std::int64_t hidden, std::int64_t ffn, int tp, std::int64_t tokens) {
  std::vector<GemmShape> v;
  for (std::int64_t s = 1024; s <= 16384; s *= 2) v.push_back({s, s, s});
  if (hidden > 0 && tp > 0 && tokens > 0) {
    if (ffn <= 0) ffn = 4 * hidden;
    v.push_back({tokens, 3 * hidden / tp, hidden});
    v.push_back({tokens, hidden, hidden / tp});
    v.push_back({tokens, ffn / tp, hidden});
    v.push_back({tokens, hidden, ffn / tp});
  }
  return v;
}

BenchmarkEntry hbm_entry(const MeasureOptions& mo, std::int64_t max_bytes) {
  return {"hbm/d2d", [mo, max_bytes](CalibrationProfile& p) {
            Timer timer;
            std::int64_t limit = std::min<std::int64_t>(free_bytes() / 3, kGiB);
            if (max_bytes > 0) limit = std::min(limit, max_bytes);
            for (std::int64_t bytes = 64 * kMiB; bytes <= limit; bytes *= 2) {
              DeviceBuffer src(bytes), dst(bytes);
              SP_CUDA(cudaMemsetAsync(src.ptr, 0x5a, static_cast<size_t>(bytes), timer.stream));
              const auto m = measure(
                  [&](std::int64_t iters) {
                    return timer.time(
                        [&] {
                          SP_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, static_cast<size_t>(bytes),
                                                  cudaMemcpyDeviceToDevice, timer.stream));
                        },
                        iters);
                  },
                  mo);
              // A copy reads and writes every byte: 2 x bytes of HBM traffic.
              p.add_hbm_sample({2 * bytes, m.median_s, m.min_s, m.max_s, m.repetitions, m.iterations});
            }
            if (p.hbm_samples().empty())
              throw BenchmarkFailure("not enough free memory for a 64 MiB copy", 64 * kMiB);
          }};
}

BenchmarkEntry gemm_entry(const MeasureOptions& mo, std::vector<GemmShape> shapes) {
  return {"gemm/bf16", [mo, shapes](CalibrationProfile& p) {
            std::string how;
            const double peak = device_peak_bf16_flops(&how);
            cublasLtHandle_t lt = nullptr;
            SP_CUBLAS(cublasLtCreate(&lt));
            struct Guard {
              cublasLtHandle_t h;
              ~Guard() { cublasLtDestroy(h); }
            } guard{lt};
            const std::int64_t workspace_bytes = 32 * kMiB;
            DeviceBuffer workspace(workspace_bytes);
            Timer timer;
            double best = 0;
            for (const auto& s : shapes) {
              if (s.m <= 0 || s.n <= 0 || s.k <= 0) continue;
              const std::int64_t bytes = 2 * (s.m * s.k + s.k * s.n + s.m * s.n);
              if (bytes > free_bytes() / 2) continue;  // too large for this GPU
              DeviceBuffer a(2 * s.m * s.k), b(2 * s.k * s.n), c(2 * s.m * s.n);
              SP_CUDA(cudaMemsetAsync(a.ptr, 0, static_cast<size_t>(2 * s.m * s.k), timer.stream));
              SP_CUDA(cudaMemsetAsync(b.ptr, 0, static_cast<size_t>(2 * s.k * s.n), timer.stream));
              // Column-major C(m x n) = A^T B with A stored k x m ("TN", the layout frameworks hit most).
              cublasLtMatmulDesc_t op = nullptr;
              cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
              cublasLtMatmulPreference_t pref = nullptr;
              SP_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
              const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
              SP_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
              SP_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
              SP_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.m, s.k));
              SP_CUBLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.n, s.k));
              SP_CUBLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.m, s.n, s.m));
              SP_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
              SP_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &workspace_bytes, sizeof workspace_bytes));
              cublasLtMatmulHeuristicResult_t heur{};
              int found = 0;
              SP_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
              const float alpha = 1.0f, beta = 0.0f;
              auto once = [&] {
                SP_CUBLAS(cublasLtMatmul(lt, op, &alpha, a.ptr, la, b.ptr, lb, &beta, c.ptr, lc, c.ptr, lc,
                                         &heur.algo, workspace.ptr, static_cast<size_t>(workspace_bytes),
                                         timer.stream));
              };
              Measurement m;
              if (found > 0) m = measure([&](std::int64_t iters) { return timer.time(once, iters); }, mo);
              cublasLtMatmulPreferenceDestroy(pref);
              cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb),
                  cublasLtMatrixLayoutDestroy(lc);
              cublasLtMatmulDescDestroy(op);
              if (found == 0)
                throw BenchmarkFailure("cuBLASLt has no bf16 algorithm for " + std::to_string(s.m) + "x" +
                                           std::to_string(s.n) + "x" + std::to_string(s.k),
                                       std::nullopt);
              const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k) / m.median_s;
              best = std::max(best, flops);
              p.add_gemm_sample(
                  {s.m, s.n, s.k, "bf16", m.median_s, flops, m.min_s, m.max_s, m.repetitions, m.iterations});
            }
            if (peak > 0)
              p.set_gemm_peak(peak, how);
            else
              p.set_gemm_peak(best, how + "; peak = best measured GEMM");
          }};
}

BenchmarkEntry adamw_entry(AdamwLayout layout, const MeasureOptions& mo, std::int64_t max_bytes) {
  return {
      "adamw/" + std::string(adamw_layout_name(layout)), [layout, mo, max_bytes](CalibrationProfile& p) {
        Timer timer;
        const AdamwHyper hyper;
        // Device state for a list of tensors of the given sizes, uploaded from host states.
        struct State {
          std::vector<std::unique_ptr<DeviceBuffer>> buffers;
          std::vector<AdamwDeviceTensor> tensors;
        };
        auto upload = [&](const std::vector<AdamwHostState>& host) {
          State st;
          for (const auto& h : host) {
            AdamwDeviceTensor t;
            t.n = static_cast<std::int64_t>(h.size());
            auto put32 = [&](const std::vector<float>& v, float*& dst) {
              if (v.empty()) return;
              st.buffers.push_back(std::make_unique<DeviceBuffer>(4 * t.n));
              dst = static_cast<float*>(st.buffers.back()->ptr);
              SP_CUDA(cudaMemcpy(dst, v.data(), 4 * v.size(), cudaMemcpyHostToDevice));
            };
            auto put16 = [&](const std::vector<std::uint16_t>& v, std::uint16_t*& dst) {
              if (v.empty()) return;
              st.buffers.push_back(std::make_unique<DeviceBuffer>(2 * t.n));
              dst = static_cast<std::uint16_t*>(st.buffers.back()->ptr);
              SP_CUDA(cudaMemcpy(dst, v.data(), 2 * v.size(), cudaMemcpyHostToDevice));
            };
            put32(h.p32, t.p32), put32(h.g32, t.g32), put32(h.m32, t.m32), put32(h.v32, t.v32);
            put16(h.p16, t.p16), put16(h.g16, t.g16), put16(h.m16, t.m16), put16(h.v16, t.v16);
            st.tensors.push_back(t);
          }
          return st;
        };
        // Correctness outside the timed loop: three odd-sized tensors, one step, against the CPU reference.
        {
          std::vector<AdamwHostState> host;
          for (std::size_t n : {1000u, 70001u, 5u}) host.push_back(AdamwHostState::random(layout, n, 17 + n));
          State st = upload(host);
          const auto s1 = adamw_step_scalars(hyper, 1);
          adamw_multi_tensor_step(layout, st.tensors, s1, timer.stream);
          SP_CUDA(cudaStreamSynchronize(timer.stream));
          for (std::size_t i = 0; i < host.size(); ++i) {
            AdamwHostState gpu = host[i];
            const auto& t = st.tensors[i];
            if (layout == AdamwLayout::kBf16)
              SP_CUDA(cudaMemcpy(gpu.p16.data(), t.p16, 2 * gpu.p16.size(), cudaMemcpyDeviceToHost));
            else
              SP_CUDA(cudaMemcpy(gpu.p32.data(), t.p32, 4 * gpu.p32.size(), cudaMemcpyDeviceToHost));
            adamw_reference_step(host[i], s1);
            // fp32 math on both sides; FMA contraction on the GPU may differ in the last bits; bf16 by one
            // ulp.
            const double tol = layout == AdamwLayout::kBf16 ? 1e-2 : 1e-5;
            if (adamw_max_rel_diff(gpu, host[i], 1e-3) > tol)
              throw BenchmarkFailure("AdamW kernel disagrees with the CPU reference (layout " +
                                         std::string(adamw_layout_name(layout)) + ")",
                                     std::nullopt);
          }
        }
        const std::int64_t per_param = adamw_bytes_per_param(layout);
        std::int64_t limit = free_bytes() / 2;
        if (max_bytes > 0) limit = std::min(limit, max_bytes);
        for (std::int64_t params = std::int64_t{1} << 20;
             params * per_param <= limit && params <= (std::int64_t{1} << 28); params *= 4) {
          // 16 equal tensors (one launch table, chunks spread over many blocks), zero-filled on the device:
          // the values do not change the bytes moved.
          State st;
          for (int i = 0; i < 16; ++i) {
            AdamwDeviceTensor t;
            t.n = params / 16;
            auto zeros = [&](std::int64_t elem_bytes) {
              st.buffers.push_back(std::make_unique<DeviceBuffer>(elem_bytes * t.n));
              SP_CUDA(cudaMemset(st.buffers.back()->ptr, 0, static_cast<size_t>(elem_bytes * t.n)));
              return st.buffers.back()->ptr;
            };
            if (layout == AdamwLayout::kBf16) {
              t.p16 = static_cast<std::uint16_t*>(zeros(2)), t.g16 = static_cast<std::uint16_t*>(zeros(2));
              t.m16 = static_cast<std::uint16_t*>(zeros(2)), t.v16 = static_cast<std::uint16_t*>(zeros(2));
            } else {
              t.p32 = static_cast<float*>(zeros(4)), t.m32 = static_cast<float*>(zeros(4));
              t.v32 = static_cast<float*>(zeros(4));
              if (layout == AdamwLayout::kFp32) {
                t.g32 = static_cast<float*>(zeros(4));
              } else {
                t.g16 = static_cast<std::uint16_t*>(zeros(2)), t.p16 = static_cast<std::uint16_t*>(zeros(2));
              }
            }
            st.tensors.push_back(t);
          }
          std::int64_t step = 0;
          const auto m = measure(
              [&](std::int64_t iters) {
                return timer.time(
                    [&] {
                      adamw_multi_tensor_step(layout, st.tensors, adamw_step_scalars(hyper, ++step),
                                              timer.stream);
                    },
                    iters);
              },
              mo);
          p.add_adamw_sample(adamw_layout_name(layout), {params, params * per_param, m.median_s, m.min_s,
                                                         m.max_s, m.repetitions, m.iterations});
        }
      }};
}

}  // namespace shardplan::calibration::cuda
