/* test_k_fft.c - tpu::fft_c2c, tpu::fft_r2c, tpu::fft_c2r (kernels/fft.c)
 * against a naive O(n^2) DFT in long double: every length 1..64, primes
 * (97, 251, 1009: Bluestein above 61), powers of two up to 4096, 1000 and
 * 4096*3; both directions, the three norm modes, float32 and float64;
 * strided, transposed and broadcast inputs; multi-dim transforms in any dim
 * order; c2r on non-Hermitian input (the imaginary parts of entries 0 and
 * n/2 ignored, extra entries past n//2+1 ignored); results equal with and
 * without the thread pool; empty tensors and argument errors. The largest
 * errors relative to the output's largest magnitude are printed. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kutil.h"
#include "tests/test_kernel_util.h"
#include "tpu/base.h"
#include "tpu/kernels.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double g_worst[2]; /* largest relative error seen: [0] float32, [1] float64 */

static const long double kTwoPi = 6.283185307179586476925286766559005768L;

/* ---- long double reference ------------------------------------------------------ */

/* A contiguous complex array (interleaved) of shape S[0..k). */
typedef struct {
  int k;
  int64_t S[TPU_MAX_DIMS];
  int64_t n;
  long double* v;
} ref_t;

static ref_t ref_new(int k, const int64_t* S) {
  ref_t r;
  memset(&r, 0, sizeof(r));
  r.k = k;
  r.n = 1;
  for (int i = 0; i < k; ++i) {
    r.S[i] = S[i];
    r.n *= S[i];
  }
  r.v = calloc((size_t)(r.n > 0 ? r.n : 1) * 2, sizeof(long double));
  return r;
}

/* Element strides of r (complex elements). */
static void ref_strides(const ref_t* r, int64_t* st) {
  int64_t s = 1;
  for (int i = r->k - 1; i >= 0; --i) {
    st[i] = s;
    s *= r->S[i];
  }
}

/* In place: the DFT (sign -1 or +1, unnormalised) along dim d. */
static void ref_dft_dim(ref_t* r, int d, int sign) {
  const int64_t n = r->S[d];
  if (n == 0 || r->n == 0) return;
  int64_t st[TPU_MAX_DIMS];
  ref_strides(r, st);
  long double* in = malloc((size_t)n * 2 * sizeof(long double));
  long double* cs = malloc((size_t)n * 2 * sizeof(long double));
  for (int64_t t = 0; t < n; ++t) {
    cs[2 * t] = cosl(kTwoPi * (long double)t / (long double)n);
    cs[2 * t + 1] = (long double)sign * sinl(kTwoPi * (long double)t / (long double)n);
  }
  const int64_t lines = r->n / n;
  for (int64_t li = 0; li < lines; ++li) {
    /* base offset of line li over the other dims */
    int64_t rem = li, off = 0;
    for (int i = r->k - 1; i >= 0; --i) {
      if (i == d) continue;
      off += (rem % r->S[i]) * st[i];
      rem /= r->S[i];
    }
    for (int64_t t = 0; t < n; ++t) {
      in[2 * t] = r->v[2 * (off + t * st[d])];
      in[2 * t + 1] = r->v[2 * (off + t * st[d]) + 1];
    }
    for (int64_t kk = 0; kk < n; ++kk) {
      long double re = 0, im = 0;
      int64_t idx = 0;
      for (int64_t t = 0; t < n; ++t) {
        const long double c = cs[2 * idx], s = cs[2 * idx + 1];
        re += in[2 * t] * c - in[2 * t + 1] * s;
        im += in[2 * t] * s + in[2 * t + 1] * c;
        idx += kk;
        if (idx >= n) idx -= n;
      }
      r->v[2 * (off + kk * st[d])] = re;
      r->v[2 * (off + kk * st[d]) + 1] = im;
    }
  }
  free(in);
  free(cs);
}

/* cos and sin of 2 pi t/n, t < n, for the last n asked (test-only cache). */
static long double* g_tab;
static int64_t g_tab_n;
static const long double* ref_table(int64_t n) {
  if (g_tab_n != n) {
    free(g_tab);
    g_tab = malloc((size_t)n * 2 * sizeof(long double));
    for (int64_t t = 0; t < n; ++t) {
      g_tab[2 * t] = cosl(kTwoPi * (long double)t / (long double)n);
      g_tab[2 * t + 1] = sinl(kTwoPi * (long double)t / (long double)n);
    }
    g_tab_n = n;
  }
  return g_tab;
}

/* Entry k of the DFT of the single line x[0..n) (for long lines, sampled). */
static void ref_dft_at(const long double* x, int64_t n, int64_t kk, int sign, long double* re, long double* im) {
  const long double* tab = ref_table(n);
  long double a = 0, b = 0;
  int64_t idx = 0;
  for (int64_t t = 0; t < n; ++t) {
    const long double c = tab[2 * idx], s = (long double)sign * tab[2 * idx + 1];
    a += x[2 * t] * c - x[2 * t + 1] * s;
    b += x[2 * t] * s + x[2 * t + 1] * c;
    idx += kk;
    if (idx >= n) idx -= n;
  }
  *re = a;
  *im = b;
}

static long double norm_scale(int norm, long double n) {
  if (norm == 1) return 1.0L / sqrtl(n);
  if (norm == 2) return 1.0L / n;
  return 1.0L;
}

/* ---- tensors ---------------------------------------------------------------------- */

typedef enum { L_CONTIG = 0, L_PERM = 1, L_GAP = 2, L_BCAST = 3 } layout_t;

/* A tensor of shape sz[0..nd) in the given layout: L_PERM reverses the
 * memory order of the dims, L_GAP spreads the innermost memory dim by 3,
 * L_BCAST makes dim `bdim` a zero-stride broadcast. Filled with uniform
 * [-1, 1) values. */
static tt_t make_input(int dt, int nd, const int64_t* sz, layout_t lay, int bdim) {
  int perm[TPU_MAX_DIMS];
  for (int i = 0; i < nd; ++i) perm[i] = lay == L_PERM ? nd - 1 - i : i;
  int64_t s2[TPU_MAX_DIMS];
  memcpy(s2, sz, sizeof(int64_t) * (size_t)nd);
  if (lay == L_BCAST) s2[bdim] = 1;
  tt_t t = tku_alloc(dt, nd, s2, lay == L_PERM ? perm : NULL, lay == L_GAP ? 3 : 1, 0);
  tku_fill(&t, &g_rng, 1.0, false);
  if (lay == L_BCAST) {
    t.t.sizes[bdim] = sz[bdim];
    t.t.strides[bdim] = 0;
  }
  return t;
}

/* The complex values of a real view (*S, 2) into a reference. */
static ref_t ref_from_complex(const tpu_tensor_t* x) {
  ref_t r = ref_new(x->ndim - 1, x->sizes);
  for (int64_t i = 0; i < r.n; ++i) {
    r.v[2 * i] = getf(x, 2 * i);
    r.v[2 * i + 1] = getf(x, 2 * i + 1);
  }
  return r;
}
static ref_t ref_from_real(const tpu_tensor_t* x) {
  ref_t r = ref_new(x->ndim, x->sizes);
  for (int64_t i = 0; i < r.n; ++i) r.v[2 * i] = getf(x, i);
  return r;
}

/* Compares `got` (row-major values, complex when `cplx`) with r scaled by sc.
 * Returns the error relative to the largest reference magnitude. */
static double compare(const tpu_tensor_t* got, const ref_t* r, bool cplx, long double sc) {
  long double big = 0, err = 0;
  for (int64_t i = 0; i < r->n; ++i) {
    const long double wr = r->v[2 * i] * sc, wi = r->v[2 * i + 1] * sc;
    const long double m = sqrtl(wr * wr + wi * wi);
    if (m > big) big = m;
    long double e;
    if (cplx) {
      const long double dr = getf(got, 2 * i) - wr, di = getf(got, 2 * i + 1) - wi;
      e = sqrtl(dr * dr + di * di);
    } else {
      e = fabsl(getf(got, i) - wr);
    }
    if (!(e <= err)) err = e; /* NaN propagates */
  }
  return (double)(big > 0 ? err / big : err);
}

static bool within(int dt, double rel, const char* what) {
  const double lim = dt == TPU_DTYPE_F32 ? 2e-6 : 5e-14;
  double* w = &g_worst[dt == TPU_DTYPE_F32 ? 0 : 1];
  if (rel > *w || rel != rel) *w = rel;
  const bool good = rel <= lim;
  CHECKF(good, "%s %s: relative error %.3g > %.3g", what, tpu_dtype_name(dt), rel, lim);
  return good;
}

static tpu_status_t run_c2c(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, bool fwd,
                            const tpu_tensor_t* out) {
  tpu_k_value_t a[4] = {vt(x), vints(dims, nd), vi(norm), vb(fwd)};
  return call_op("tpu::fft_c2c", 4, a, 1, out);
}
static tpu_status_t run_r2c(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, bool onesided,
                            const tpu_tensor_t* out) {
  tpu_k_value_t a[4] = {vt(x), vints(dims, nd), vi(norm), vb(onesided)};
  return call_op("tpu::fft_r2c", 4, a, 1, out);
}
static tpu_status_t run_c2r(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, int64_t last,
                            const tpu_tensor_t* out) {
  tpu_k_value_t a[4] = {vt(x), vints(dims, nd), vi(norm), vi(last)};
  return call_op("tpu::fft_c2r", 4, a, 1, out);
}

/* ---- multi-dim references of the three ops ------------------------------------------ */

static long double signal_n(const int64_t* S, const int64_t* dims, int nd) {
  long double n = 1;
  for (int i = 0; i < nd; ++i) n *= (long double)S[dims[i]];
  return n;
}

/* c2c of `x` (*S, 2) over dims, checked. */
static void check_c2c(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, bool fwd, const char* what) {
  const int k = x->ndim - 1;
  int64_t os[TPU_MAX_DIMS];
  for (int i = 0; i <= k; ++i) os[i] = x->sizes[i];
  tt_t out = tku_alloc(x->dtype, k + 1, os, NULL, 1, 0);
  if (!ok(run_c2c(x, dims, nd, norm, fwd, &out.t))) {
    CHECKF(false, "%s: c2c failed", what);
    fr(&out);
    return;
  }
  ref_t r = ref_from_complex(x);
  for (int i = 0; i < nd; ++i) ref_dft_dim(&r, (int)dims[i], fwd ? -1 : 1);
  char buf[160];
  snprintf(buf, sizeof buf, "c2c %s norm %d %s", what, norm, fwd ? "forward" : "backward");
  within(x->dtype, compare(&out.t, &r, true, norm_scale(norm, signal_n(r.S, dims, nd))), buf);
  free(r.v);
  fr(&out);
}

static void check_r2c(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, bool onesided, const char* what) {
  const int k = x->ndim;
  const int dl = (int)dims[nd - 1];
  int64_t os[TPU_MAX_DIMS];
  for (int i = 0; i < k; ++i) os[i] = x->sizes[i];
  if (onesided) os[dl] = x->sizes[dl] / 2 + 1;
  os[k] = 2;
  tt_t out = tku_alloc(x->dtype, k + 1, os, NULL, 1, 0);
  if (!ok(run_r2c(x, dims, nd, norm, onesided, &out.t))) {
    CHECKF(false, "%s: r2c failed", what);
    fr(&out);
    return;
  }
  ref_t full = ref_from_real(x);
  for (int i = 0; i < nd; ++i) ref_dft_dim(&full, (int)dims[i], -1);
  ref_t r = ref_new(k, os); /* the kept part */
  int64_t fst[TPU_MAX_DIMS], idx[TPU_MAX_DIMS];
  ref_strides(&full, fst);
  for (int64_t i = 0; i < r.n; ++i) {
    int64_t rem = i, off = 0;
    for (int d = k - 1; d >= 0; --d) {
      idx[d] = rem % os[d];
      rem /= os[d];
      off += idx[d] * fst[d];
    }
    r.v[2 * i] = full.v[2 * off];
    r.v[2 * i + 1] = full.v[2 * off + 1];
  }
  char buf[160];
  snprintf(buf, sizeof buf, "r2c %s norm %d onesided %d", what, norm, (int)onesided);
  within(x->dtype, compare(&out.t, &r, true, norm_scale(norm, signal_n(x->sizes, dims, nd))), buf);
  free(full.v);
  free(r.v);
  fr(&out);
}

/* c2r: inverse DFT over dims[:-1], then the Hermitian inverse of the first
 * last//2+1 entries along dims[-1]. */
static void check_c2r(const tpu_tensor_t* x, const int64_t* dims, int nd, int norm, int64_t last, const char* what) {
  const int k = x->ndim - 1;
  const int dl = (int)dims[nd - 1];
  int64_t os[TPU_MAX_DIMS];
  for (int i = 0; i < k; ++i) os[i] = x->sizes[i];
  os[dl] = last;
  tt_t out = tku_alloc(x->dtype, k, os, NULL, 1, 0);
  if (!ok(run_c2r(x, dims, nd, norm, last, &out.t))) {
    CHECKF(false, "%s: c2r failed", what);
    fr(&out);
    return;
  }
  ref_t r = ref_from_complex(x);
  for (int i = 0; i < nd - 1; ++i) ref_dft_dim(&r, (int)dims[i], 1);
  /* Hermitian extension along dl into a reference of shape os. */
  ref_t e = ref_new(k, os);
  int64_t rst[TPU_MAX_DIMS], idx[TPU_MAX_DIMS];
  ref_strides(&r, rst);
  for (int64_t i = 0; i < e.n; ++i) {
    int64_t rem = i;
    for (int d = k - 1; d >= 0; --d) {
      idx[d] = rem % os[d];
      rem /= os[d];
    }
    const int64_t kk = idx[dl];
    const bool mirror = kk > last / 2;
    idx[dl] = mirror ? last - kk : kk;
    int64_t off = 0;
    for (int d = 0; d < k; ++d) off += idx[d] * rst[d];
    long double re = r.v[2 * off], im = r.v[2 * off + 1];
    if (kk == 0 || 2 * kk == last) im = 0;
    e.v[2 * i] = re;
    e.v[2 * i + 1] = mirror ? -im : im;
  }
  ref_dft_dim(&e, dl, 1);
  int64_t sg[TPU_MAX_DIMS];
  for (int i = 0; i < k; ++i) sg[i] = x->sizes[i];
  sg[dl] = last;
  char buf[160];
  snprintf(buf, sizeof buf, "c2r %s norm %d last %lld", what, norm, (long long)last);
  within(x->dtype, compare(&out.t, &e, false, norm_scale(norm, signal_n(sg, dims, nd))), buf);
  free(r.v);
  free(e.v);
  fr(&out);
}

/* ---- tests ---------------------------------------------------------------------------- */

static const int kDt[2] = {TPU_DTYPE_F32, TPU_DTYPE_F64};

/* Every length 1..64 and a few more, 1-d and batched, all three ops. */
static void test_lengths(void) {
  for (int di = 0; di < 2; ++di) {
    const int dt = kDt[di];
    for (int64_t n = 1; n <= 64; ++n) {
      char what[64];
      snprintf(what, sizeof what, "n=%lld", (long long)n);
      int64_t cs[3] = {3, n, 2};
      tt_t x = make_input(dt, 3, cs, L_CONTIG, 0);
      const int64_t d1[1] = {1};
      const int norm = (int)(n % 3);
      check_c2c(&x.t, d1, 1, norm, true, what);
      check_c2c(&x.t, d1, 1, (norm + 1) % 3, false, what);
      /* c2r reads the first n//2+1 entries of x's n (non-Hermitian) entries */
      check_c2r(&x.t, d1, 1, norm, 2 * n - 1, what);
      check_c2r(&x.t, d1, 1, (norm + 2) % 3, 2 * n - 2, what);
      check_c2r(&x.t, d1, 1, norm, n, what);
      fr(&x);
      int64_t rs[2] = {3, n};
      tt_t xr = make_input(dt, 2, rs, L_CONTIG, 0);
      check_r2c(&xr.t, d1, 1, norm, true, what);
      check_r2c(&xr.t, d1, 1, (norm + 1) % 3, false, what);
      fr(&xr);
    }
  }
}

/* Long lines: every output for n <= 1024, a sample of 61 outputs above. */
static void long_case(int dt, int64_t n) {
  int64_t cs[2] = {n, 2};
  tt_t x = make_input(dt, 2, cs, L_CONTIG, 0);
  tt_t o = tku_alloc(dt, 2, cs, NULL, 1, 0);
  int64_t rs[1] = {n};
  tt_t xr = make_input(dt, 1, rs, L_CONTIG, 0);
  int64_t hs[2] = {n / 2 + 1, 2};
  tt_t oh = tku_alloc(dt, 2, hs, NULL, 1, 0);
  tt_t orr = tku_alloc(dt, 1, rs, NULL, 1, 0);
  const int64_t d0[1] = {0};
  long double* v = malloc((size_t)n * 2 * sizeof(long double));
  long double* vr = malloc((size_t)n * 2 * sizeof(long double));
  for (int64_t t = 0; t < n; ++t) {
    v[2 * t] = getf(&x.t, 2 * t);
    v[2 * t + 1] = getf(&x.t, 2 * t + 1);
    vr[2 * t] = getf(&xr.t, t);
    vr[2 * t + 1] = 0;
  }
  /* the Hermitian signal c2r sees: x's first n//2+1 entries, extended */
  long double* vh = malloc((size_t)n * 2 * sizeof(long double));
  for (int64_t kk = 0; kk < n; ++kk) {
    const bool mirror = kk > n / 2;
    const int64_t s = mirror ? n - kk : kk;
    vh[2 * kk] = v[2 * s];
    vh[2 * kk + 1] = (kk == 0 || 2 * kk == n) ? 0 : (mirror ? -v[2 * s + 1] : v[2 * s + 1]);
  }
  CHECK_OK(run_c2c(&x.t, d0, 1, 0, true, &o.t));
  CHECK_OK(run_r2c(&xr.t, d0, 1, 1, true, &oh.t));
  tpu_tensor_t xh = x.t; /* c2r of x's first n//2+1 entries */
  xh.sizes[0] = n / 2 + 1;
  CHECK_OK(run_c2r(&xh, d0, 1, 2, n, &orr.t));
  const int64_t samples = n <= 1024 ? n : 61;
  long double big = 0, e1 = 0, big2 = 0, e2 = 0, big3 = 0, e3 = 0;
  for (int64_t si = 0; si < samples; ++si) {
    const int64_t kk = n <= 1024 ? si : (si * 7919 + 13) % n;
    long double re, im;
    ref_dft_at(v, n, kk, -1, &re, &im);
    big = fmaxl(big, sqrtl(re * re + im * im));
    e1 = fmaxl(e1, sqrtl(powl(getf(&o.t, 2 * kk) - re, 2) + powl(getf(&o.t, 2 * kk + 1) - im, 2)));
    if (kk <= n / 2) {
      ref_dft_at(vr, n, kk, -1, &re, &im);
      const long double s = 1.0L / sqrtl((long double)n);
      big2 = fmaxl(big2, s * sqrtl(re * re + im * im));
      e2 = fmaxl(e2, sqrtl(powl(getf(&oh.t, 2 * kk) - s * re, 2) + powl(getf(&oh.t, 2 * kk + 1) - s * im, 2)));
    }
    ref_dft_at(vh, n, kk, 1, &re, &im);
    big3 = fmaxl(big3, fabsl(re) / n);
    e3 = fmaxl(e3, fabsl(getf(&orr.t, kk) - re / n));
  }
  char what[64];
  snprintf(what, sizeof what, "c2c n=%lld", (long long)n);
  within(dt, (double)(e1 / big), what);
  snprintf(what, sizeof what, "r2c n=%lld", (long long)n);
  within(dt, (double)(e2 / big2), what);
  snprintf(what, sizeof what, "c2r n=%lld", (long long)n);
  within(dt, (double)(e3 / big3), what);
  free(v);
  free(vr);
  free(vh);
  fr(&x);
  fr(&o);
  fr(&xr);
  fr(&oh);
  fr(&orr);
}

static void test_long(void) {
  static const int64_t kN[] = {97,   128,  251,       256,       512,   1000,  1009,   1024,
                               2048, 4096, 4096 * 3, 2 * 1009, 3 * 127, 32768, 40000, 45045, 1 << 17};
  for (int di = 0; di < 2; ++di)
    for (size_t i = 0; i < sizeof kN / sizeof kN[0]; ++i) long_case(kDt[di], kN[i]);
}

/* Long lines (four steps) in a batch larger than one group of the kernel's
 * intermediate, transposed and gapped, checked at two outputs per line. */
static void test_four_step_batched(void) {
  const int64_t B = 130, n = 32768, h = n / 2 + 1;
  const int dt = TPU_DTYPE_F32;
  int64_t cs[3] = {B, n, 2}, rs[2] = {B, n}, hs[3] = {B, h, 2};
  tt_t x = make_input(dt, 3, cs, L_PERM, 0), o = tku_alloc(dt, 3, cs, NULL, 1, 0);
  tt_t xr = make_input(dt, 2, rs, L_GAP, 0), oh = tku_alloc(dt, 3, hs, NULL, 1, 0);
  tt_t orr = tku_alloc(dt, 2, rs, NULL, 1, 0);
  const int64_t d1[1] = {1};
  CHECK_OK(run_c2c(&x.t, d1, 1, 1, false, &o.t));
  CHECK_OK(run_r2c(&xr.t, d1, 1, 0, true, &oh.t));
  tpu_tensor_t xh = x.t;
  xh.sizes[1] = h;
  CHECK_OK(run_c2r(&xh, d1, 1, 2, n, &orr.t));
  long double* v = malloc((size_t)n * 2 * sizeof(long double));
  long double* vr = malloc((size_t)n * 2 * sizeof(long double));
  long double* vh = malloc((size_t)n * 2 * sizeof(long double));
  double e1 = 0, e2 = 0, e3 = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < n; ++t) {
      v[2 * t] = getf(&x.t, (b * n + t) * 2);
      v[2 * t + 1] = getf(&x.t, (b * n + t) * 2 + 1);
      vr[2 * t] = getf(&xr.t, b * n + t);
      vr[2 * t + 1] = 0;
    }
    for (int64_t kk = 0; kk < n; ++kk) {
      const bool mirror = kk > n / 2;
      const int64_t s = mirror ? n - kk : kk;
      vh[2 * kk] = v[2 * s];
      vh[2 * kk + 1] = (kk == 0 || 2 * kk == n) ? 0 : (mirror ? -v[2 * s + 1] : v[2 * s + 1]);
    }
    for (int j = 0; j < 2; ++j) {
      const int64_t kk = j == 0 ? (b * 977 + 5) % n : (b * 31) % h;
      long double re, im;
      const long double sq = sqrtl((long double)n);
      ref_dft_at(v, n, kk, 1, &re, &im); /* ~sqrt(n) in magnitude: errors relative to that */
      const int64_t oi = (b * n + kk) * 2;
      e1 = fmax(e1, (double)(sqrtl(powl(getf(&o.t, oi) - re / sq, 2) + powl(getf(&o.t, oi + 1) - im / sq, 2))));
      if (kk < h) {
        ref_dft_at(vr, n, kk, -1, &re, &im);
        const int64_t hi = (b * h + kk) * 2;
        e2 = fmax(e2, (double)(sqrtl(powl(getf(&oh.t, hi) - re, 2) + powl(getf(&oh.t, hi + 1) - im, 2)) / sq));
      }
      ref_dft_at(vh, n, kk, 1, &re, &im);
      e3 = fmax(e3, (double)(fabsl(getf(&orr.t, b * n + kk) - re / n) * sq));
    }
  }
  within(dt, e1, "four-step batched c2c");
  within(dt, e2, "four-step batched r2c");
  within(dt, e3, "four-step batched c2r");
  free(v);
  free(vr);
  free(vh);
  fr(&x);
  fr(&o);
  fr(&xr);
  fr(&oh);
  fr(&orr);
}

/* Multi-dim transforms, dims in any order, on strided and broadcast inputs. */
static void test_multidim(void) {
  static const int64_t dA[2] = {2, 0}, dB[3] = {0, 1, 2}, dC[1] = {1}, dD[3] = {2, 1, 0}, dE[2] = {0, 2},
                       dF[2] = {2, 1}, dG[2] = {0, 1};
  for (int di = 0; di < 2; ++di) {
    const int dt = kDt[di];
    for (int lay = 0; lay < 4; ++lay) {
      char what[64];
      snprintf(what, sizeof what, "3x5x8 layout %d", lay);
      int64_t cs[4] = {3, 5, 8, 2};
      tt_t x = make_input(dt, 4, cs, (layout_t)lay, 1);
      for (int norm = 0; norm < 3; ++norm) {
        check_c2c(&x.t, dA, 2, norm, norm != 1, what);
        check_c2c(&x.t, dB, 3, norm, norm == 1, what);
        check_c2c(&x.t, dC, 1, norm, true, what);
        check_c2r(&x.t, dE, 2, norm, 14, what); /* reads 8 of 8 */
        check_c2r(&x.t, dD, 3, norm, 5, what);  /* reads 3 of 3 */
        check_c2r(&x.t, dF, 2, norm, 9, what);  /* reads 5 of 5 */
        check_c2r(&x.t, dG, 2, norm, 4, what);  /* reads 3 of 5 */
      }
      fr(&x);
      int64_t rs[3] = {3, 5, 8};
      tt_t xr = make_input(dt, 3, rs, (layout_t)lay, 1);
      for (int norm = 0; norm < 3; ++norm) {
        check_r2c(&xr.t, dA, 2, norm, true, what);
        check_r2c(&xr.t, dB, 3, norm, norm != 2, what);
        check_r2c(&xr.t, dD, 3, norm, true, what);
        check_r2c(&xr.t, dC, 1, norm, false, what);
      }
      fr(&xr);
    }
    /* a Bluestein length and a generic prime radix inside a 2-d transform */
    int64_t cs[3] = {67, 7 * 11, 2};
    tt_t x = make_input(dt, 3, cs, L_PERM, 0);
    const int64_t d01[2] = {0, 1}, d10[2] = {1, 0};
    check_c2c(&x.t, d01, 2, 1, true, "67x77");
    check_c2r(&x.t, d10, 2, 2, 133, "67x77");
    fr(&x);
    int64_t rs[2] = {67, 77};
    tt_t xr = make_input(dt, 2, rs, L_GAP, 0);
    check_r2c(&xr.t, d10, 2, 0, true, "67x77");
    fr(&xr);
  }
}

/* Real transforms take lines in pairs: a NaN, an infinity, a zero line or a
 * line 1e6 times larger than its neighbour must not spoil the other line. */
static void test_pairs_apart(void) {
  for (int di = 0; di < 2; ++di) {
    const int dt = kDt[di];
    const int64_t n = 24, h = n / 2 + 1;
    int64_t rs[2] = {8, n}, cs[3] = {8, h, 2};
    tt_t xr = make_input(dt, 2, rs, L_CONTIG, 0), xc = make_input(dt, 3, cs, L_CONTIG, 0);
    setf(&xr.t, 0 * n + 5, NAN);
    setf(&xr.t, 2 * n + 7, INFINITY);
    setf(&xc.t, (1 * h + 3) * 2 + 1, NAN);
    setf(&xc.t, (3 * h + 2) * 2, -INFINITY);
    for (int64_t t = 0; t < n; ++t) {
      setf(&xr.t, 4 * n + t, 0.0);
      setf(&xr.t, 6 * n + t, 1e6 * getf(&xr.t, 6 * n + t));
    }
    for (int64_t k = 0; k < 2 * h; ++k) {
      setf(&xc.t, 5 * 2 * h + k, 0.0);
      setf(&xc.t, 6 * 2 * h + k, 1e6 * getf(&xc.t, 6 * 2 * h + k));
    }
    tt_t o = tku_alloc(dt, 3, cs, NULL, 1, 0), orr = tku_alloc(dt, 2, rs, NULL, 1, 0);
    const int64_t d1[1] = {1};
    CHECK_OK(run_r2c(&xr.t, d1, 1, 0, true, &o.t));
    CHECK_OK(run_c2r(&xc.t, d1, 1, 0, n, &orr.t));
    for (int64_t l = 0; l < 8; ++l) {
      /* each line alone */
      tpu_tensor_t lr = xr.t, lo = o.t, lc = xc.t, lro = orr.t;
      lr.data = (char*)xr.t.data + l * n * tpu_dtype_size(dt);
      lr.sizes[0] = 1;
      lo.data = (char*)o.t.data + l * 2 * h * tpu_dtype_size(dt);
      lo.sizes[0] = 1;
      lc.data = (char*)xc.t.data + l * 2 * h * tpu_dtype_size(dt);
      lc.sizes[0] = 1;
      lro.data = (char*)orr.t.data + l * n * tpu_dtype_size(dt);
      lro.sizes[0] = 1;
      const bool bad_r = l == 0 || l == 2, bad_c = l == 1 || l == 3;
      char what[64];
      snprintf(what, sizeof what, "pairs apart, line %lld", (long long)l);
      ref_t r = ref_from_real(&lr);
      ref_dft_dim(&r, 1, -1);
      ref_t rk = ref_new(2, (const int64_t[]){1, h});
      for (int64_t k = 0; k < 2 * h; ++k) rk.v[k] = r.v[k];
      if (bad_r) {
        bool all_bad = getf(&lo, 1) == 0.0 && getf(&lo, 2 * h - 1) == 0.0; /* bins 0 and n/2 are real */
        for (int64_t k = 0; k < h; ++k) all_bad = all_bad && !(isfinite(getf(&lo, 2 * k)) && isfinite(getf(&lo, 2 * k + 1)));
        CHECKF(all_bad, "%s: r2c of a non-finite line", what);
      } else {
        within(dt, compare(&lo, &rk, true, 1.0L), what);
      }
      if (l == 4) {
        bool zero = true;
        for (int64_t k = 0; k < 2 * h; ++k) zero = zero && getf(&lo, k) == 0.0;
        CHECKF(zero, "%s: r2c of zeros", what);
      }
      free(r.v);
      free(rk.v);
      if (!bad_c) {
        tt_t one = tku_alloc(dt, 2, (const int64_t[]){1, n}, NULL, 1, 0);
        CHECK_OK(run_c2r(&lc, d1, 1, 0, n, &one.t));
        bool same = true;
        for (int64_t t = 0; t < n; ++t) same = same && getf(&one.t, t) == getf(&lro, t);
        CHECKF(same, "%s: c2r differs from the line alone", what);
        check_c2r(&lc, d1, 1, 0, n, what);
        fr(&one);
        if (l == 5) {
          bool zero = true;
          for (int64_t t = 0; t < n; ++t) zero = zero && getf(&lro, t) == 0.0;
          CHECKF(zero, "%s: c2r of zeros", what);
        }
      }
    }
    fr(&xr);
    fr(&xc);
    fr(&o);
    fr(&orr);
  }
}

/* The same call with the pool and without gives the same bits. */
static void test_threads(void) {
  int64_t cs[3] = {37, 96, 2};
  tt_t x = make_input(TPU_DTYPE_F32, 3, cs, L_PERM, 0);
  tt_t a = tku_alloc(TPU_DTYPE_F32, 3, cs, NULL, 1, 0), b = tku_alloc(TPU_DTYPE_F32, 3, cs, NULL, 1, 0);
  const int64_t d[2] = {1, 0};
  tpu_k_value_t args[4] = {vt(&x.t), vints(d, 2), vi(1), vb(true)};
  CHECK_OK(call_op_pool("tpu::fft_c2c", args, 4, &a.t, g_pool));
  CHECK_OK(call_op_pool("tpu::fft_c2c", args, 4, &b.t, NULL));
  CHECK(memcmp(a.buf, b.buf, 37 * 96 * 2 * sizeof(float)) == 0);
  int64_t os[2] = {37, 96};
  tt_t ra = tku_alloc(TPU_DTYPE_F32, 2, os, NULL, 1, 0), rb = tku_alloc(TPU_DTYPE_F32, 2, os, NULL, 1, 0);
  const int64_t dc[2] = {0, 1};
  tpu_k_value_t cargs[4] = {vt(&x.t), vints(dc, 2), vi(2), vi(96)};
  x.t.sizes[1] = 49;
  CHECK_OK(call_op_pool("tpu::fft_c2r", cargs, 4, &ra.t, g_pool));
  CHECK_OK(call_op_pool("tpu::fft_c2r", cargs, 4, &rb.t, NULL));
  CHECK(memcmp(ra.buf, rb.buf, 37 * 96 * sizeof(float)) == 0);
  fr(&x);
  fr(&a);
  fr(&b);
  fr(&ra);
  fr(&rb);
}

static void test_empty_and_copy(void) {
  /* c2c over no dims: a copy (of a transposed input into a contiguous output) */
  int64_t cs[3] = {4, 3, 2};
  tt_t x = make_input(TPU_DTYPE_F64, 3, cs, L_PERM, 0);
  tt_t o = tku_alloc(TPU_DTYPE_F64, 3, cs, NULL, 1, 0);
  CHECK_OK(run_c2c(&x.t, NULL, 0, 2, true, &o.t));
  bool same = true;
  for (int64_t i = 0; i < 24; ++i) same = same && getf(&o.t, i) == getf(&x.t, i);
  CHECK(same);
  fr(&o);
  /* empty transforms and batches: nothing to do */
  int64_t es[3] = {0, 3, 2};
  tt_t e = tku_alloc(TPU_DTYPE_F32, 3, es, NULL, 1, 0);
  const int64_t d0[1] = {0}, d1[1] = {1};
  CHECK_OK(run_c2c(&e.t, d0, 1, 0, true, &e.t));
  CHECK_OK(run_c2c(&e.t, d1, 1, 0, true, &e.t));
  int64_t os[2] = {0, 7};
  tt_t eo = tku_alloc(TPU_DTYPE_F32, 2, os, NULL, 1, 0);
  CHECK_OK(run_c2r(&e.t, d1, 1, 0, 7, &eo.t));
  int64_t z2[2] = {0, 3};
  tt_t zo = tku_alloc(TPU_DTYPE_F64, 2, z2, NULL, 1, 0);
  CHECK_OK(run_c2r(&x.t, d0, 1, 0, 0, &zo.t));
  /* r2c of a length-0 signal with a non-empty output: the CPU's error */
  int64_t rz[2] = {3, 0}, rzo[3] = {3, 1, 2};
  tt_t xr = tku_alloc(TPU_DTYPE_F32, 2, rz, NULL, 1, 0), xro = tku_alloc(TPU_DTYPE_F32, 3, rzo, NULL, 1, 0);
  CHECK_STATUS(run_r2c(&xr.t, d1, 1, 0, true, &xro.t), TPU_STATUS_INVALID_ARGUMENT, "Invalid number of data points (0)");
  fr(&x);
  fr(&e);
  fr(&eo);
  fr(&zo);
  fr(&xr);
  fr(&xro);
}

static void test_errors(void) {
  int64_t cs[2] = {8, 2}, rs[1] = {8};
  tt_t h = tku_alloc(TPU_DTYPE_F16, 2, cs, NULL, 1, 0), hr = tku_alloc(TPU_DTYPE_F16, 1, rs, NULL, 1, 0);
  tt_t x = tku_alloc(TPU_DTYPE_F32, 2, cs, NULL, 1, 0), xr = tku_alloc(TPU_DTYPE_F32, 1, rs, NULL, 1, 0);
  tt_t xd = tku_alloc(TPU_DTYPE_F64, 2, cs, NULL, 1, 0);
  int64_t hs[2] = {5, 2}, bs[2] = {8, 3};
  tt_t oh = tku_alloc(TPU_DTYPE_F32, 2, hs, NULL, 1, 0), b3 = tku_alloc(TPU_DTYPE_F32, 2, bs, NULL, 1, 0);
  const int64_t d0[1] = {0}, d1[1] = {1}, dm[1] = {-1}, dd[2] = {0, 0};
  CHECK_STATUS(run_c2c(&h.t, d0, 1, 0, true, &h.t), TPU_STATUS_UNIMPLEMENTED, "tpu::fft_c2c: dtype float16");
  CHECK_STATUS(run_r2c(&hr.t, d0, 1, 0, true, &oh.t), TPU_STATUS_UNIMPLEMENTED, "tpu::fft_r2c: dtype float16");
  CHECK_STATUS(run_c2r(&h.t, d0, 1, 0, 8, &hr.t), TPU_STATUS_UNIMPLEMENTED, "tpu::fft_c2r: dtype float16");
  CHECK_STATUS(run_c2c(&b3.t, d0, 1, 0, true, &b3.t), TPU_STATUS_INVALID_ARGUMENT, "last dim of size 2");
  CHECK_STATUS(run_c2c(&x.t, d1, 1, 0, true, &x.t), TPU_STATUS_OUT_OF_RANGE, "Dimension out of range");
  CHECK_STATUS(run_c2c(&x.t, dm, 1, 0, true, &x.t), TPU_STATUS_OUT_OF_RANGE, "but got -1");
  int64_t c2s[3] = {4, 4, 2};
  tt_t x2 = tku_alloc(TPU_DTYPE_F32, 3, c2s, NULL, 1, 0);
  CHECK_STATUS(run_c2c(&x2.t, dd, 2, 0, true, &x2.t), TPU_STATUS_INVALID_ARGUMENT, "more than once");
  CHECK_STATUS(run_c2c(&x.t, d0, 1, 3, true, &x.t), TPU_STATUS_INVALID_ARGUMENT, "normalization");
  CHECK_STATUS(run_c2c(&x.t, d0, 1, 0, true, &xd.t), TPU_STATUS_INVALID_ARGUMENT, "input's dtype");
  CHECK_STATUS(run_c2c(&x.t, d0, 1, 0, true, &oh.t), TPU_STATUS_INVALID_ARGUMENT, "expected [8, 2]");
  CHECK_STATUS(run_r2c(&xr.t, NULL, 0, 0, true, &oh.t), TPU_STATUS_INVALID_ARGUMENT, "at least one dim");
  CHECK_STATUS(run_r2c(&xr.t, d0, 1, 0, false, &oh.t), TPU_STATUS_INVALID_ARGUMENT, "output of shape [5, 2]");
  CHECK_OK(run_r2c(&xr.t, d0, 1, 0, true, &oh.t));
  CHECK_STATUS(run_c2r(&oh.t, d0, 1, 0, 10, &b3.t), TPU_STATUS_INVALID_ARGUMENT, "fewer than the 6");
  CHECK_STATUS(run_c2r(&oh.t, d0, 1, 0, -1, &xr.t), TPU_STATUS_INVALID_ARGUMENT, "non-negative");
  CHECK_STATUS(run_c2r(&oh.t, NULL, 0, 0, 8, &xr.t), TPU_STATUS_INVALID_ARGUMENT, "at least one dim");
  tpu_k_value_t few[2] = {vt(&x.t), vints(d0, 1)};
  CHECK_STATUS(call_op("tpu::fft_c2c", 2, few, 1, &x.t), TPU_STATUS_INVALID_ARGUMENT, "expected (self");
  fr(&h);
  fr(&hr);
  fr(&x);
  fr(&xr);
  fr(&xd);
  fr(&oh);
  fr(&b3);
  fr(&x2);
}

int main(void) {
  if (!tku_start(2)) return 1;
  RUN_TEST(test_lengths);
  RUN_TEST(test_long);
  RUN_TEST(test_four_step_batched);
  RUN_TEST(test_multidim);
  RUN_TEST(test_pairs_apart);
  RUN_TEST(test_threads);
  RUN_TEST(test_empty_and_copy);
  RUN_TEST(test_errors);
  printf("largest relative error: float32 %.3g, float64 %.3g\n", g_worst[0], g_worst[1]);
  free(g_tab);
  return tku_finish();
}
