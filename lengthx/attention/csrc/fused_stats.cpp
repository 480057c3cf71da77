// Fused T5 encoder attention over the flipped offset table, with the sums behind P_max and entropy
// (paper A Algorithm 1's FindS; docs/design.md §9). Built on first use by lengthx/attention/fused.py and
// registered as the operator torch.ops.<extension name>.fused_attention (few headers: it compiles quickly).
//
// For every (example, head, block of query rows) the keys are read in blocks, flash-attention style: the
// scores of a block are a small matrix product, the bias row of each query is a contiguous run of the
// flipped table F (keys reversed), and an online softmax keeps per row the running maximum m, Z = Σ e^{s−m}
// and W = Σ e^{s−m}·(s − m). When m rises to m', Z' = αZ and W' = α(W + (m − m')Z) with α = e^{m−m'}, and the
// output accumulator is rescaled by α. At the end P_max = 1/Z and H = log Z − W/Z (lengthx.attention.stats).
// Shifted scores are floored at EXP_FLOOR, as in the explicit path, so no denormals arise.

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

// The BLAS that torch links (MKL on x86) exports the Fortran sgemm_; declared weak, so that a torch build
// without it still loads this extension and takes torch's own matmul instead.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

namespace {

using Vec = at::vec::Vectorized<float>;

// Column-major C (m × n) = alpha·op(A)·op(B) + beta·C.
inline void blas_gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ilda = static_cast<int>(lda), ildb = static_cast<int>(ldb), ildc = static_cast<int>(ldc);
  sgemm_(&ta, &tb, &im, &in, &ik, &alpha, a, &ilda, b, &ildb, &beta, c, &ildc);
}

// s (rows × cols, row-major) = scale · Q (rows × D) · K (cols × D)ᵀ.
inline void block_scores(const float* q, const float* k, float* s, int64_t rows, int64_t cols, int64_t d,
                         float scale) {
  if (sgemm_ != nullptr) {  // column-major views: K is D × cols, Q is D × rows; Kᵀ·Q (cols × rows) is s, row-major
    blas_gemm('T', 'N', cols, rows, d, scale, k, d, q, d, 0.0f, s, cols);
    return;
  }
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto qt = at::from_blob(const_cast<float*>(q), {rows, d}, opts);
  auto kt = at::from_blob(const_cast<float*>(k), {cols, d}, opts);
  auto st = at::from_blob(s, {rows, cols}, opts);
  at::mm_out(st, qt, kt.t());
  st.mul_(scale);
}

// acc (rows × dv, row-major) = e (rows × cols) · V (cols × dv), added to acc unless first.
inline void block_values(const float* e, const float* v, float* acc, int64_t rows, int64_t cols, int64_t dv,
                         bool first) {
  if (sgemm_ != nullptr) {  // column-major views: V is dv × cols, e is cols × rows; V·e (dv × rows) is acc, row-major
    blas_gemm('N', 'N', dv, rows, cols, 1.0f, v, dv, e, cols, first ? 0.0f : 1.0f, acc, dv);
    return;
  }
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto et = at::from_blob(const_cast<float*>(e), {rows, cols}, opts);
  auto vt = at::from_blob(const_cast<float*>(v), {cols, dv}, opts);
  auto at_ = at::from_blob(acc, {rows, dv}, opts);
  if (first) {
    at::mm_out(at_, et, vt);
  } else {
    at_.addmm_(et, vt);
  }
}
constexpr float kExpFloor = -80.0f;

inline float lanes_max(const Vec& v) {
  alignas(64) float lane[Vec::size()];
  v.store(lane);
  return *std::max_element(lane, lane + Vec::size());
}

inline float lanes_sum(const Vec& v) {
  alignas(64) float lane[Vec::size()];
  v.store(lane);
  float total = 0.0f;
  for (int64_t i = 0; i < Vec::size(); ++i) total += lane[i];
  return total;
}

// s[j] += bias[j] for j < n; returns max_j s[j].
inline float add_bias_max(float* s, const float* bias, int64_t n) {
  const int64_t w = Vec::size();
  Vec vmax(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + w <= n; j += w) {
    Vec x = Vec::loadu(s + j) + Vec::loadu(bias + j);
    x.store(s + j);
    vmax = at::vec::maximum(vmax, x);
  }
  float m = lanes_max(vmax);
  for (; j < n; ++j) {
    s[j] += bias[j];
    m = std::max(m, s[j]);
  }
  return m;
}

// s[j] = e^{t_j} with t_j = max(s[j] − m, EXP_FLOOR); adds Σ e to *z and Σ e·t to *w.
inline void exp_sums(float* s, float m, int64_t n, float* z, float* w) {
  const int64_t vw = Vec::size();
  const Vec vm(m), vfloor(kExpFloor);
  Vec vz(0.0f), vwt(0.0f);
  int64_t j = 0;
  for (; j + vw <= n; j += vw) {
    Vec t = at::vec::maximum(Vec::loadu(s + j) - vm, vfloor);
    Vec e = t.exp();
    e.store(s + j);
    vz = vz + e;
    vwt = at::vec::fmadd(e, t, vwt);
  }
  float zs = lanes_sum(vz);
  float ws = lanes_sum(vwt);
  for (; j < n; ++j) {
    float t = std::max(s[j] - m, kExpFloor);
    float e = std::exp(t);
    s[j] = e;
    zs += e;
    ws += e * t;
  }
  *z += zs;
  *w += ws;
}

inline void scale_row(float* x, float a, int64_t n) {
  const int64_t vw = Vec::size();
  const Vec va(a);
  int64_t j = 0;
  for (; j + vw <= n; j += vw) (Vec::loadu(x + j) * va).store(x + j);
  for (; j < n; ++j) x[j] *= a;
}

}  // namespace

// query (B, H, Lq, D), key_f (B, H, N, D) and value_f (B, H, N, Dv): fp32, contiguous, keys and values
// reversed. flipped (H, W): the flipped offset table; query row i and reversed key c read
// flipped[h, i + bias_offset + c]. Writes out (B, H, Lq, Dv) = softmax(scale·QKᵀ + bias)·V and, per row,
// z = Σ e^{s−m} and w = Σ e^{s−m}·(s − m) of the final maximum m (B, H, Lq).
void fused_attention(const at::Tensor& query, const at::Tensor& key_f, const at::Tensor& value_f,
                     const at::Tensor& flipped, int64_t bias_offset, double scale, const at::Tensor& out,
                     const at::Tensor& z_out, const at::Tensor& w_out, int64_t q_block, int64_t kv_block) {
  const at::Tensor* all[] = {&query, &key_f, &value_f, &flipped, &out, &z_out, &w_out};
  const char* names[] = {"query", "key_f", "value_f", "flipped", "out", "z_out", "w_out"};
  for (int i = 0; i < 7; ++i) {
    TORCH_CHECK(all[i]->device().is_cpu(), "fused attention: ", names[i], " is not on the CPU");
    TORCH_CHECK(all[i]->scalar_type() == at::kFloat, "fused attention: ", names[i], " is ",
                all[i]->scalar_type(), ", not float32");
    TORCH_CHECK(all[i]->is_contiguous(), "fused attention: ", names[i], " is not contiguous");
  }
  TORCH_CHECK(query.dim() == 4 && key_f.dim() == 4 && value_f.dim() == 4 && out.dim() == 4,
              "fused attention: query, key_f, value_f and out must be 4-d (B, H, L, D), got ", query.sizes(), ", ",
              key_f.sizes(), ", ", value_f.sizes(), ", ", out.sizes());
  TORCH_CHECK(flipped.dim() == 2 && z_out.dim() == 3 && w_out.dim() == 3,
              "fused attention: flipped must be 2-d (H, W) and z_out, w_out 3-d (B, H, L_q)");
  const int64_t B = query.size(0), H = query.size(1), Lq = query.size(2), D = query.size(3);
  const int64_t N = key_f.size(2), Dv = value_f.size(3), W = flipped.size(1);
  TORCH_CHECK(key_f.size(0) == B && key_f.size(1) == H && key_f.size(3) == D,
              "fused attention: key_f ", key_f.sizes(), " does not match query ", query.sizes(),
              " in batch, heads or head dimension");
  TORCH_CHECK(value_f.size(0) == B && value_f.size(1) == H && value_f.size(2) == N,
              "fused attention: value_f ", value_f.sizes(), " does not match key_f ", key_f.sizes(),
              " in batch, heads or keys");
  TORCH_CHECK(flipped.size(0) == H, "fused attention: flipped has ", flipped.size(0), " rows, not one per head (",
              H, ")");
  TORCH_CHECK(out.size(0) == B && out.size(1) == H && out.size(2) == Lq && out.size(3) == Dv,
              "fused attention: out ", out.sizes(), " is not (B, H, L_q, D_v) = (", B, ", ", H, ", ", Lq, ", ",
              Dv, ")");
  TORCH_CHECK(z_out.sizes() == w_out.sizes() && z_out.size(0) == B && z_out.size(1) == H && z_out.size(2) == Lq,
              "fused attention: z_out ", z_out.sizes(), " and w_out ", w_out.sizes(), " must both be (B, H, L_q)");
  TORCH_CHECK(q_block > 0 && kv_block > 0, "fused attention: q_block and kv_block must be positive");
  TORCH_CHECK(N > 0, "fused attention needs at least one key");
  TORCH_CHECK(bias_offset >= 0 && bias_offset + (Lq - 1) + (N - 1) < W, "bias offset outside the offset table");
  const float* q = query.data_ptr<float>();
  const float* k = key_f.data_ptr<float>();
  const float* v = value_f.data_ptr<float>();
  const float* f = flipped.data_ptr<float>();
  float* o = out.data_ptr<float>();
  float* zo = z_out.data_ptr<float>();
  float* wo = w_out.data_ptr<float>();
  const int64_t q_blocks = (Lq + q_block - 1) / q_block;
  const float fscale = static_cast<float>(scale);

  at::parallel_for(0, B * H * q_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s_buf(q_block * kv_block), acc(q_block * Dv), m(q_block), z(q_block), w(q_block);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks, qb = task % q_blocks, h = bh % H;
      const int64_t q0 = qb * q_block, rows = std::min(q_block, Lq - q0);
      const float* qp = q + (bh * Lq + q0) * D;
      const float* kp = k + bh * N * D;
      const float* vp = v + bh * N * Dv;
      const float* fh = f + h * W + q0 + bias_offset;
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(z.begin(), z.end(), 0.0f);
      std::fill(w.begin(), w.end(), 0.0f);
      for (int64_t c0 = 0; c0 < N; c0 += kv_block) {
        const int64_t cols = std::min(kv_block, N - c0);
        float* s = s_buf.data();
        block_scores(qp, kp + c0 * D, s, rows, cols, D, fscale);
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s + r * cols;
          const float block_max = add_bias_max(sr, fh + r + c0, cols);
          const float m_old = m[r], m_new = std::max(m_old, block_max);
          float zb = 0.0f, wb = 0.0f;
          exp_sums(sr, m_new, cols, &zb, &wb);
          if (c0 == 0) {
            z[r] = zb;
            w[r] = wb;
          } else {
            const float alpha = std::exp(m_old - m_new);
            w[r] = alpha * (w[r] + (m_old - m_new) * z[r]) + wb;
            z[r] = alpha * z[r] + zb;
            if (alpha != 1.0f) scale_row(acc.data() + r * Dv, alpha, Dv);
          }
          m[r] = m_new;
        }
        block_values(s, vp + c0 * Dv, acc.data(), rows, cols, Dv, c0 == 0);
      }
      float* op = o + (bh * Lq + q0) * Dv;
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / z[r];
        for (int64_t d = 0; d < Dv; ++d) op[r * Dv + d] = acc[r * Dv + d] * inv;
        zo[bh * Lq + q0 + r] = z[r];
        wo[bh * Lq + q0 + r] = w[r];
      }
    }
  });
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("fused_attention(Tensor query, Tensor key_f, Tensor value_f, Tensor flipped, int bias_offset, float scale, "
        "Tensor(a!) out, Tensor(b!) z_out, Tensor(c!) w_out, int q_block, int kv_block) -> ()");
  m.impl("fused_attention", c10::DispatchKey::CPU, TORCH_FN(fused_attention));
}
