/* fft.c - kernel family "fft": discrete Fourier transforms over the real
 * views of complex tensors (see tpu/kernels.h for the ABI). The kernel ABI
 * has real dtypes only, so a complex tensor of shape S arrives as its real
 * view (*S, 2): [re, im] in a trailing dim of size 2, with any strides.
 *
 *   tpu::fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor
 *       self (*S, 2) -> (*S, 2): the complex DFT over the dims `dim` of S;
 *       sign -1 in the exponent when forward, +1 otherwise. No dims: a copy.
 *   tpu::fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor
 *       self S real -> (*S', 2): the forward DFT of real data over `dim`;
 *       onesided keeps the first n//2+1 entries of the last dim of `dim`
 *       (S'[dim[-1]] = S[dim[-1]]//2+1), else S' = S.
 *   tpu::fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor
 *       self (*S, 2) -> real S with S[dim[-1]] = last_dim_size = n: an
 *       inverse (+1) complex DFT over dim[:-1], then the inverse DFT of a
 *       Hermitian signal over dim[-1], reading its first n//2+1 entries.
 *       The imaginary parts the symmetry fixes (entry 0, and n/2 when n is
 *       even) are ignored, as PyTorch's CPU (MKL and pocketfft) does.
 *
 * These mirror ATen's _fft_c2c, _fft_r2c and _fft_c2r: `dim` are dims of S
 * (non-negative, distinct, any order; at least one for r2c and c2r);
 * normalization is ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n,
 * n the product of the signal's transformed sizes (for c2r, last_dim_size
 * for its last dim). Dtypes float32 and float64; outputs of the input's
 * dtype, any non-overlapping strides (the bridge gives contiguous ones).
 *
 * Method: 1-d transforms along each dim in turn, lines in parallel (each line
 * is computed the same way whatever the thread count). A line is loaded into
 * a double scratch, transformed, scaled and stored in the dtype, so float32
 * data is rounded once per transformed dim. The 1-d transform of length n is
 * a Stockham autosort mixed-radix FFT (radices 4, 2, 3, 5 and a direct DFT
 * for other primes up to FT_MAX_PRIME) computing in double, or, when n has a
 * larger prime factor, Bluestein's chirp-z algorithm over a power-of-two FFT.
 * Only the forward transform exists: the inverse is conj(DFT(conj(x))).
 * Lines of FT_FOUR_MIN entries and more (without a prime factor above
 * FT_MAX_PRIME) go by four steps over an n1 x n2 split (see below), which
 * also spreads one long line over the threads. Shorter real transforms take
 * two lines at once as the real and imaginary parts of one complex transform
 * and separate them by symmetry, when both lines are finite and their largest
 * magnitudes are within a factor 1000 (a line's rounding errors follow the
 * larger of the pair, and a NaN would reach the other line); otherwise one
 * line at a time.
 *
 * Twiddle factors are computed per call in double from cos/sin of exact
 * rational angles (octant symmetry when 4 divides n) and kept, with the
 * per-line scratch, in malloc'd workspaces: the exception to "kernels
 * allocate nothing", as in factor.c; failure is OUT_OF_MEMORY naming the op
 * and the bytes. Workspaces: plans of O(n) complex doubles per distinct
 * length (~2 sqrt(n) for four-step lengths), 2 max(n, M) per task (M: the
 * Bluestein length, < 4n), a double intermediate of at most 64 MiB for
 * four-step passes, and for multi-dim c2r the half spectrum in the dtype. */
#include <float.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kutil.h"

#define FT_MAX_PRIME 61    /* larger prime factors go through Bluestein */
#define FT_MAX_STAGES 64
#define FT_MAX_N ((int64_t)1 << 40) /* longest transform (workspace sizes stay far from overflow) */

typedef struct {
  double re, im;
} fc_t;

static inline fc_t fc_mul(fc_t a, fc_t b) {
  fc_t r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
  return r;
}
static inline fc_t fc_add(fc_t a, fc_t b) {
  fc_t r = {a.re + b.re, a.im + b.im};
  return r;
}
static inline fc_t fc_sub(fc_t a, fc_t b) {
  fc_t r = {a.re - b.re, a.im - b.im};
  return r;
}

/* ---- plans ------------------------------------------------------------------------ */

/* One Stockham radix-p pass over a length-n sequence: n = s * p * m, s the
 * product of the earlier radices. */
typedef struct {
  int p;
  int64_t m, s;
  const fc_t* tw;    /* (p-1) * m twiddles: tw[j*(p-1) + k-1] = e^{-2 pi i jk/(pm)} */
  const fc_t* roots; /* p roots e^{-2 pi i r/p} (generic radix only) */
} ft_stage_t;

typedef struct ft_plan_s {
  int64_t n;
  int nst;
  ft_stage_t st[FT_MAX_STAGES];
  int64_t M;              /* Bluestein: the power-of-two convolution length; 0: mixed radix */
  const fc_t* chirp;      /* n: e^{-pi i t^2/n} */
  const fc_t* fb;         /* M: DFT of the conjugate chirp, divided by M */
  struct ft_plan_s* sub;  /* the plan of length M */
  fc_t* mem;              /* owns tw/roots/chirp/fb */
} ft_plan_t;

/* E[t] = e^{-2 pi i t/n} for t in [0, n). */
static void ft_unit_roots(int64_t n, fc_t* E) {
  const double w = 6.283185307179586476925286766559 / (double)n;
  if (n % 4 == 0) {
    const int64_t q = n / 4;
    for (int64_t t = 0; 2 * t <= q; ++t) {
      E[t].re = cos(w * (double)t);
      E[t].im = -sin(w * (double)t);
    }
    for (int64_t t = q / 2 + 1; t <= q; ++t) { /* e^{-i(pi/2 - a)} from e^{-ia} */
      E[t].re = -E[q - t].im;
      E[t].im = -E[q - t].re;
    }
    for (int64_t t = q + 1; t <= 2 * q; ++t) { /* times -i */
      E[t].re = E[t - q].im;
      E[t].im = -E[t - q].re;
    }
    for (int64_t t = 2 * q + 1; t < n; ++t) {
      E[t].re = E[n - t].re;
      E[t].im = -E[n - t].im;
    }
  } else {
    for (int64_t t = 0; 2 * t <= n; ++t) {
      E[t].re = cos(w * (double)t);
      E[t].im = -sin(w * (double)t);
    }
    for (int64_t t = n / 2 + 1; t < n; ++t) {
      E[t].re = E[n - t].re;
      E[t].im = -E[n - t].im;
    }
  }
}

/* Radices of n, largest prime factor in *maxp. */
static int ft_factor(int64_t n, int* rad, int64_t* maxp) {
  int k = 0;
  *maxp = 1;
  while (n % 4 == 0 && k < FT_MAX_STAGES) {
    rad[k++] = 4;
    n /= 4;
    *maxp = 2;
  }
  if (n % 2 == 0) {
    rad[k++] = 2;
    n /= 2;
    *maxp = 2;
  }
  for (int64_t p = 3; p * p <= n; p += 2) {
    while (n % p == 0) {
      if (k < FT_MAX_STAGES) rad[k] = (int)(p <= FT_MAX_PRIME ? p : 0);
      k++;
      n /= p;
      *maxp = p;
    }
  }
  if (n > 1) {
    if (k < FT_MAX_STAGES) rad[k] = (int)(n <= FT_MAX_PRIME ? n : 0);
    k++;
    if (n > *maxp) *maxp = n;
  }
  return k;
}

static int64_t ft_pow2_at_least(int64_t v) {
  int64_t m = 1;
  while (m < v) m *= 2;
  return m;
}

static void ft_plan_free(ft_plan_t* P) {
  if (!P) return;
  ft_plan_free(P->sub);
  free(P->mem);
  free(P);
}

static fc_t* ft_exec(const ft_plan_t* P, fc_t* x, fc_t* y);

/* A plan for length n >= 1; NULL when out of memory (*bytes: what was asked). */
static ft_plan_t* ft_plan_new(int64_t n, size_t* bytes) {
  ft_plan_t* P = (ft_plan_t*)calloc(1, sizeof(ft_plan_t));
  *bytes = sizeof(ft_plan_t);
  if (!P) return NULL;
  P->n = n;
  int rad[FT_MAX_STAGES];
  int64_t maxp;
  const int k = ft_factor(n, rad, &maxp);
  if (maxp > FT_MAX_PRIME || k > FT_MAX_STAGES) {
    /* Bluestein: X[k] = c[k] sum_t (x[t] c[t]) conj(c[k-t]), c[t] = e^{-pi i t^2/n}. */
    const int64_t M = ft_pow2_at_least(2 * n - 1);
    P->M = M;
    P->sub = ft_plan_new(M, bytes);
    if (!P->sub) {
      ft_plan_free(P);
      return NULL;
    }
    *bytes = (size_t)(n + 3 * M) * sizeof(fc_t);
    P->mem = (fc_t*)malloc((size_t)(n + M) * sizeof(fc_t));
    fc_t* tmp = (fc_t*)malloc(2 * (size_t)M * sizeof(fc_t)); /* the sub-transform's buffers */
    if (!P->mem || !tmp) {
      free(tmp);
      ft_plan_free(P);
      return NULL;
    }
    fc_t* chirp = P->mem;
    fc_t* fb = chirp + n;
    const double w = 3.14159265358979323846264338327950288 / (double)n;
    int64_t r = 0; /* t^2 mod 2n */
    for (int64_t t = 0; t < n; ++t) {
      chirp[t].re = cos(w * (double)r);
      chirp[t].im = -sin(w * (double)r);
      r += 2 * t + 1;
      if (r >= 2 * n) r -= 2 * n;
    }
    for (int64_t u = 0; u < M; ++u) tmp[u].re = tmp[u].im = 0.0;
    for (int64_t u = 0; u < n; ++u) {
      tmp[u].re = chirp[u].re;
      tmp[u].im = -chirp[u].im;
      if (u > 0) tmp[M - u] = tmp[u];
    }
    const fc_t* f = ft_exec(P->sub, tmp, tmp + M);
    const double inv = 1.0 / (double)M;
    for (int64_t u = 0; u < M; ++u) {
      fb[u].re = f[u].re * inv;
      fb[u].im = f[u].im * inv;
    }
    free(tmp);
    P->chirp = chirp;
    P->fb = fb;
    return P;
  }
  /* Mixed radix: twiddle tables of sum (p-1) m <= n entries, roots of the generic radices. */
  size_t ntw = 0;
  int64_t s = 1;
  for (int i = 0; i < k; ++i) {
    const int64_t m = n / (s * rad[i]);
    ntw += (size_t)((rad[i] - 1) * m);
    if (rad[i] > 5) ntw += (size_t)rad[i];
    s *= rad[i];
  }
  *bytes = (ntw + (size_t)n) * sizeof(fc_t);
  P->mem = (fc_t*)malloc(ntw ? ntw * sizeof(fc_t) : 1);
  fc_t* E = (fc_t*)malloc((size_t)n * sizeof(fc_t));
  if (!P->mem || !E) {
    free(E);
    ft_plan_free(P);
    return NULL;
  }
  ft_unit_roots(n, E);
  fc_t* w = P->mem;
  s = 1;
  for (int i = 0; i < k; ++i) {
    ft_stage_t* st = &P->st[i];
    const int p = rad[i];
    const int64_t m = n / (s * p);
    st->p = p;
    st->m = m;
    st->s = s;
    st->tw = w;
    for (int64_t j = 0; j < m; ++j)
      for (int kk = 1; kk < p; ++kk) *w++ = E[s * j * kk]; /* s j k < s m p = n */
    st->roots = NULL;
    if (p > 5) {
      st->roots = w;
      for (int r = 0; r < p; ++r) *w++ = E[(n / p) * r];
    }
    s *= p;
  }
  P->nst = k;
  free(E);
  return P;
}

/* ---- the 1-d transform ---------------------------------------------------------- */

static void ft_stage(const ft_stage_t* S, const fc_t* restrict x, fc_t* restrict y) {
  const int64_t m = S->m, s = S->s;
  const fc_t* tw = S->tw;
  switch (S->p) {
    case 2:
      for (int64_t j = 0; j < m; ++j) {
        const fc_t w1 = tw[j];
        const fc_t* a = x + s * j;
        fc_t* b = y + s * 2 * j;
        for (int64_t q = 0; q < s; ++q) {
          const fc_t a0 = a[q], a1 = a[q + s * m];
          b[q] = fc_add(a0, a1);
          b[q + s] = fc_mul(fc_sub(a0, a1), w1);
        }
      }
      break;
    case 3: {
      const double h = 0.86602540378443864676372317075293618; /* sin(2 pi/3) */
      for (int64_t j = 0; j < m; ++j) {
        const fc_t w1 = tw[2 * j], w2 = tw[2 * j + 1];
        const fc_t* a = x + s * j;
        fc_t* b = y + s * 3 * j;
        for (int64_t q = 0; q < s; ++q) {
          const fc_t a0 = a[q], a1 = a[q + s * m], a2 = a[q + 2 * s * m];
          const fc_t t = fc_add(a1, a2), d = fc_sub(a1, a2);
          const fc_t c = {a0.re - 0.5 * t.re, a0.im - 0.5 * t.im};
          const fc_t b1 = {c.re + h * d.im, c.im - h * d.re}, b2 = {c.re - h * d.im, c.im + h * d.re};
          b[q] = fc_add(a0, t);
          b[q + s] = fc_mul(b1, w1);
          b[q + 2 * s] = fc_mul(b2, w2);
        }
      }
      break;
    }
    case 4:
      for (int64_t j = 0; j < m; ++j) {
        const fc_t w1 = tw[3 * j], w2 = tw[3 * j + 1], w3 = tw[3 * j + 2];
        const fc_t* a = x + s * j;
        fc_t* b = y + s * 4 * j;
        for (int64_t q = 0; q < s; ++q) {
          const fc_t a0 = a[q], a1 = a[q + s * m], a2 = a[q + 2 * s * m], a3 = a[q + 3 * s * m];
          const fc_t t0 = fc_add(a0, a2), t1 = fc_sub(a0, a2), t2 = fc_add(a1, a3), t3 = fc_sub(a1, a3);
          const fc_t b1 = {t1.re + t3.im, t1.im - t3.re}, b3 = {t1.re - t3.im, t1.im + t3.re};
          b[q] = fc_add(t0, t2);
          b[q + s] = fc_mul(b1, w1);
          b[q + 2 * s] = fc_mul(fc_sub(t0, t2), w2);
          b[q + 3 * s] = fc_mul(b3, w3);
        }
      }
      break;
    case 5: {
      const double c1 = 0.30901699437494742410229341718281906;  /* cos(2 pi/5) */
      const double c2 = -0.80901699437494742410229341718281906; /* cos(4 pi/5) */
      const double s1 = 0.95105651629515357211643933337938214;  /* sin(2 pi/5) */
      const double s2 = 0.58778525229247312916870595463907277;  /* sin(4 pi/5) */
      for (int64_t j = 0; j < m; ++j) {
        const fc_t* wj = tw + 4 * j;
        const fc_t* a = x + s * j;
        fc_t* b = y + s * 5 * j;
        for (int64_t q = 0; q < s; ++q) {
          const fc_t a0 = a[q], a1 = a[q + s * m], a2 = a[q + 2 * s * m], a3 = a[q + 3 * s * m],
                     a4 = a[q + 4 * s * m];
          const fc_t t1 = fc_add(a1, a4), t2 = fc_add(a2, a3), d1 = fc_sub(a1, a4), d2 = fc_sub(a2, a3);
          const fc_t m1 = {a0.re + c1 * t1.re + c2 * t2.re, a0.im + c1 * t1.im + c2 * t2.im};
          const fc_t m2 = {a0.re + c2 * t1.re + c1 * t2.re, a0.im + c2 * t1.im + c1 * t2.im};
          const fc_t n1 = {s1 * d1.re + s2 * d2.re, s1 * d1.im + s2 * d2.im};
          const fc_t n2 = {s2 * d1.re - s1 * d2.re, s2 * d1.im - s1 * d2.im};
          /* b1 = m1 - i n1, b4 = m1 + i n1, b2 = m2 - i n2, b3 = m2 + i n2 */
          const fc_t b1 = {m1.re + n1.im, m1.im - n1.re}, b4 = {m1.re - n1.im, m1.im + n1.re};
          const fc_t b2 = {m2.re + n2.im, m2.im - n2.re}, b3 = {m2.re - n2.im, m2.im + n2.re};
          b[q] = fc_add(a0, fc_add(t1, t2));
          b[q + s] = fc_mul(b1, wj[0]);
          b[q + 2 * s] = fc_mul(b2, wj[1]);
          b[q + 3 * s] = fc_mul(b3, wj[2]);
          b[q + 4 * s] = fc_mul(b4, wj[3]);
        }
      }
      break;
    }
    default: { /* an odd prime p <= FT_MAX_PRIME: direct DFT on symmetric pairs */
      const int p = S->p, h = (p - 1) / 2;
      const fc_t* R = S->roots;
      fc_t t[FT_MAX_PRIME / 2 + 1], d[FT_MAX_PRIME / 2 + 1];
      for (int64_t j = 0; j < m; ++j) {
        const fc_t* wj = tw + (int64_t)(p - 1) * j;
        const fc_t* a = x + s * j;
        fc_t* b = y + s * p * j;
        for (int64_t q = 0; q < s; ++q) {
          const fc_t a0 = a[q];
          fc_t sum = a0;
          for (int r = 1; r <= h; ++r) {
            const fc_t u = a[q + r * s * m], v = a[q + (p - r) * s * m];
            t[r] = fc_add(u, v);
            d[r] = fc_sub(u, v);
            sum = fc_add(sum, t[r]);
          }
          b[q] = sum;
          for (int k = 1; k <= h; ++k) {
            /* b_k = a0 + sum_r cos_rk t_r - i sum_r sin_rk d_r (R = cos - i sin) */
            fc_t re = a0, im = {0.0, 0.0};
            int idx = 0;
            for (int r = 1; r <= h; ++r) {
              idx += k;
              if (idx >= p) idx -= p;
              const double c = R[idx].re, sn = -R[idx].im;
              re.re += c * t[r].re;
              re.im += c * t[r].im;
              im.re += sn * d[r].re;
              im.im += sn * d[r].im;
            }
            const fc_t bk = {re.re + im.im, re.im - im.re}, bpk = {re.re - im.im, re.im + im.re};
            b[q + k * s] = fc_mul(bk, wj[k - 1]);
            b[q + (p - k) * s] = fc_mul(bpk, wj[p - k - 1]);
          }
        }
      }
      break;
    }
  }
}

/* The forward DFT of x[0, n); y is scratch. x and y hold max(n, M) entries
 * (M: the Bluestein length). Returns the buffer holding the result (x or y). */
static fc_t* ft_exec(const ft_plan_t* P, fc_t* x, fc_t* y) {
  if (P->M == 0) {
    fc_t *a = x, *b = y;
    for (int i = 0; i < P->nst; ++i) {
      ft_stage(&P->st[i], a, b);
      fc_t* t = a;
      a = b;
      b = t;
    }
    return a;
  }
  const int64_t n = P->n, M = P->M;
  for (int64_t t = 0; t < n; ++t) x[t] = fc_mul(x[t], P->chirp[t]);
  for (int64_t t = n; t < M; ++t) x[t].re = x[t].im = 0.0;
  fc_t* r = ft_exec(P->sub, x, y);
  fc_t* o = r == x ? y : x;
  for (int64_t k = 0; k < M; ++k) { /* conj(R * FB): the inverse through the forward transform */
    const fc_t v = fc_mul(r[k], P->fb[k]);
    r[k].re = v.re;
    r[k].im = -v.im;
  }
  fc_t* r2 = ft_exec(P->sub, r, o);
  for (int64_t k = 0; k < n; ++k) {
    const fc_t v = {r2[k].re, -r2[k].im};
    r2[k] = fc_mul(v, P->chirp[k]);
  }
  return r2;
}

/* ---- strided lines ---------------------------------------------------------------- */

/* A tensor seen as lines along one dim: the other dims index the lines. */
typedef struct {
  char* p;
  int dt;
  int64_t st;  /* byte stride along the line */
  int64_t im;  /* byte offset of the imaginary part (complex views) */
  int nb;
  int64_t bsz[TPU_MAX_DIMS], bst[TPU_MAX_DIMS];
} ft_view_t;

static inline char* ft_line(const ft_view_t* v, int64_t li) {
  return tpu_ku_batch_at(v->p, v->bsz, v->bst, v->nb, li);
}

/* x[i] = line[i] (conjugated if conj), i < cnt. */
static void ft_load_c(const ft_view_t* v, const char* p, int64_t cnt, bool conj, fc_t* x) {
  const int64_t st = v->st, im = v->im;
  const double sg = conj ? -1.0 : 1.0;
  if (v->dt == TPU_DTYPE_F32) {
    for (int64_t i = 0; i < cnt; ++i) {
      x[i].re = *(const float*)(p + i * st);
      x[i].im = sg * *(const float*)(p + i * st + im);
    }
  } else {
    for (int64_t i = 0; i < cnt; ++i) {
      x[i].re = *(const double*)(p + i * st);
      x[i].im = sg * *(const double*)(p + i * st + im);
    }
  }
}

static void ft_store_c(const ft_view_t* v, char* p, int64_t cnt, bool conj, double scale, const fc_t* x) {
  const int64_t st = v->st, im = v->im;
  const double si = conj ? -scale : scale;
  if (v->dt == TPU_DTYPE_F32) {
    for (int64_t i = 0; i < cnt; ++i) {
      *(float*)(p + i * st) = (float)(x[i].re * scale);
      *(float*)(p + i * st + im) = (float)(x[i].im * si);
    }
  } else {
    for (int64_t i = 0; i < cnt; ++i) {
      *(double*)(p + i * st) = x[i].re * scale;
      *(double*)(p + i * st + im) = x[i].im * si;
    }
  }
}

static inline double ft_ld(const char* p, int dt) {
  return dt == TPU_DTYPE_F32 ? (double)*(const float*)p : *(const double*)p;
}

/* ---- passes: one 1-d transform along one dim, lines in parallel -------------------- */

enum { FT_C2C = 0, FT_R2C = 1, FT_C2R = 2 };

typedef struct {
  int kind;
  const ft_plan_t* plan;
  int64_t n;        /* transform length */
  int64_t nout;     /* r2c: entries stored (n//2+1 or n) */
  bool inverse;     /* c2c: exponent sign + */
  double scale;
  ft_view_t src, dst;
  int64_t lines;
  int64_t cap;      /* entries per scratch buffer */
  atomic_int oom;
} ft_pass_t;

static void ft_c2c_lines(ft_pass_t* ps, int64_t begin, int64_t end, fc_t* x, fc_t* y) {
  for (int64_t li = begin; li < end; ++li) {
    ft_load_c(&ps->src, ft_line(&ps->src, li), ps->n, ps->inverse, x);
    const fc_t* r = ft_exec(ps->plan, x, y);
    ft_store_c(&ps->dst, ft_line(&ps->dst, li), ps->n, ps->inverse, ps->scale, r);
  }
}

/* Two lines share one transform when their largest magnitudes are finite and
 * within a factor 1000 of each other (else the smaller's rounding errors
 * would follow the larger, and a NaN or infinity would reach the other line). */
static inline bool ft_pairable(double m0, double m1) {
  if (!(m0 <= DBL_MAX && m1 <= DBL_MAX)) return false;
  return m0 <= 1e3 * m1 && m1 <= 1e3 * m0;
}

/* Largest |re| and |im| of x[0, n), as (re max, im max); infinity for a
 * part holding a NaN or an infinity. */
static fc_t ft_absmax(const fc_t* x, int64_t n) {
  double mr = 0.0, mi = 0.0;
  int fin_r = 1, fin_i = 1;
  for (int64_t t = 0; t < n; ++t) {
    const double ar = fabs(x[t].re), ai = fabs(x[t].im);
    fin_r &= ar <= DBL_MAX; /* false for NaN and infinity */
    fin_i &= ai <= DBL_MAX;
    mr = ar > mr ? ar : mr;
    mi = ai > mi ? ai : mi;
  }
  fc_t r = {fin_r ? mr : INFINITY, fin_i ? mi : INFINITY};
  return r;
}

/* The onesided/full spectra of x's real part into line q0 and of its
 * imaginary part into line q1 (NULL: none), from Z = DFT(x). */
static void ft_r2c_store(const ft_pass_t* ps, const fc_t* Z, char* q0, char* q1) {
  const int64_t n = ps->n, dst_st = ps->dst.st, dim = ps->dst.im;
  const double h = 0.5 * ps->scale;
  const bool f32 = ps->dst.dt == TPU_DTYPE_F32;
  for (int64_t k = 0; k < ps->nout; ++k) {
    const fc_t z = Z[k], c = Z[k == 0 ? 0 : n - k]; /* X0 = (z + conj c)/2, X1 = (z - conj c)/(2i) */
    const bool real = k == 0 || 2 * k == n;       /* exactly real, as on the CPU (also for NaN input) */
    const double a_re = h * (z.re + c.re), a_im = real ? 0.0 : h * (z.im - c.im);
    const double b_re = h * (z.im + c.im), b_im = real ? 0.0 : -h * (z.re - c.re);
    if (f32) {
      *(float*)(q0 + k * dst_st) = (float)a_re;
      *(float*)(q0 + k * dst_st + dim) = (float)a_im;
      if (q1) {
        *(float*)(q1 + k * dst_st) = (float)b_re;
        *(float*)(q1 + k * dst_st + dim) = (float)b_im;
      }
    } else {
      *(double*)(q0 + k * dst_st) = a_re;
      *(double*)(q0 + k * dst_st + dim) = a_im;
      if (q1) {
        *(double*)(q1 + k * dst_st) = b_re;
        *(double*)(q1 + k * dst_st + dim) = b_im;
      }
    }
  }
}

/* x[t] = (line[t], 0) */
static void ft_load_real(const ft_pass_t* ps, int64_t li, fc_t* x) {
  const char* p = ft_line(&ps->src, li);
  for (int64_t t = 0; t < ps->n; ++t) {
    x[t].re = ft_ld(p + t * ps->src.st, ps->src.dt);
    x[t].im = 0.0;
  }
}

/* Lines 2i and 2i+1 as the real and imaginary parts of one transform. */
static void ft_r2c_pairs(ft_pass_t* ps, int64_t begin, int64_t end, fc_t* x, fc_t* y) {
  const int64_t n = ps->n, st = ps->src.st;
  const int sdt = ps->src.dt;
  for (int64_t pi = begin; pi < end; ++pi) {
    const int64_t l0 = 2 * pi;
    if (l0 + 1 >= ps->lines) {
      ft_load_real(ps, l0, x);
      ft_r2c_store(ps, ft_exec(ps->plan, x, y), ft_line(&ps->dst, l0), NULL);
      continue;
    }
    const char* p0 = ft_line(&ps->src, l0);
    const char* p1 = ft_line(&ps->src, l0 + 1);
    for (int64_t t = 0; t < n; ++t) {
      x[t].re = ft_ld(p0 + t * st, sdt);
      x[t].im = ft_ld(p1 + t * st, sdt);
    }
    const fc_t m = ft_absmax(x, n);
    if (ft_pairable(m.re, m.im)) {
      ft_r2c_store(ps, ft_exec(ps->plan, x, y), ft_line(&ps->dst, l0), ft_line(&ps->dst, l0 + 1));
      continue;
    }
    for (int64_t t = 0; t < n; ++t) x[t].im = 0.0;
    ft_r2c_store(ps, ft_exec(ps->plan, x, y), ft_line(&ps->dst, l0), NULL);
    ft_load_real(ps, l0 + 1, x);
    ft_r2c_store(ps, ft_exec(ps->plan, x, y), ft_line(&ps->dst, l0 + 1), NULL);
  }
}

/* Hermitian entry k of a line whose first n/2+1 entries are H. */
static inline fc_t ft_herm(const fc_t* H, int64_t n, int64_t k) {
  const int64_t h = n / 2 + 1;
  if (k == 0 || 2 * k == n) {
    fc_t r = {H[k].re, 0.0};
    return r;
  }
  if (k < h) return H[k];
  fc_t r = {H[n - k].re, -H[n - k].im};
  return r;
}

/* The inverse transforms of the Hermitian signals H0 and H1 (NULL: none)
 * into the real lines q0 and q1. Overwrites y (H0 and H1 may live there). */
static void ft_c2r_one(const ft_pass_t* ps, const fc_t* H0, const fc_t* H1, char* q0, char* q1, fc_t* x, fc_t* y) {
  const int64_t n = ps->n, st = ps->dst.st;
  const double sc = ps->scale;
  for (int64_t k = 0; k < n; ++k) { /* conj(Y0 + i Y1) */
    const fc_t a = ft_herm(H0, n, k);
    const fc_t b = H1 ? ft_herm(H1, n, k) : (fc_t){0.0, 0.0};
    x[k].re = a.re - b.im;
    x[k].im = -(a.im + b.re);
  }
  const fc_t* z = ft_exec(ps->plan, x, y); /* z = conj(y0 + i y1) */
  if (ps->dst.dt == TPU_DTYPE_F32) {
    for (int64_t t = 0; t < n; ++t) *(float*)(q0 + t * st) = (float)(z[t].re * sc);
    if (q1)
      for (int64_t t = 0; t < n; ++t) *(float*)(q1 + t * st) = (float)(-z[t].im * sc);
  } else {
    for (int64_t t = 0; t < n; ++t) *(double*)(q0 + t * st) = z[t].re * sc;
    if (q1)
      for (int64_t t = 0; t < n; ++t) *(double*)(q1 + t * st) = -z[t].im * sc;
  }
}

static double ft_cmax(const fc_t* H, int64_t cnt) {
  const fc_t m = ft_absmax(H, cnt);
  return m.re > m.im ? m.re : m.im;
}

static void ft_c2r_pairs(ft_pass_t* ps, int64_t begin, int64_t end, fc_t* x, fc_t* y) {
  const int64_t n = ps->n, h = n / 2 + 1;
  fc_t* H0 = y; /* the halves wait in the scratch (cap >= 2h) */
  fc_t* H1 = y + h;
  for (int64_t pi = begin; pi < end; ++pi) {
    const int64_t l0 = 2 * pi;
    ft_load_c(&ps->src, ft_line(&ps->src, l0), h, false, H0);
    if (l0 + 1 >= ps->lines) {
      ft_c2r_one(ps, H0, NULL, ft_line(&ps->dst, l0), NULL, x, y);
      continue;
    }
    ft_load_c(&ps->src, ft_line(&ps->src, l0 + 1), h, false, H1);
    if (ft_pairable(ft_cmax(H0, h), ft_cmax(H1, h))) {
      ft_c2r_one(ps, H0, H1, ft_line(&ps->dst, l0), ft_line(&ps->dst, l0 + 1), x, y);
      continue;
    }
    ft_c2r_one(ps, H0, NULL, ft_line(&ps->dst, l0), NULL, x, y);
    ft_load_c(&ps->src, ft_line(&ps->src, l0 + 1), h, false, H0);
    ft_c2r_one(ps, H0, NULL, ft_line(&ps->dst, l0 + 1), NULL, x, y);
  }
}

static void ft_chunk(void* ctx, int64_t begin, int64_t end) {
  ft_pass_t* ps = (ft_pass_t*)ctx;
  fc_t* x = (fc_t*)malloc(2 * (size_t)ps->cap * sizeof(fc_t));
  if (!x) {
    atomic_store(&ps->oom, 1);
    return;
  }
  fc_t* y = x + ps->cap;
  if (ps->kind == FT_C2C) {
    ft_c2c_lines(ps, begin, end, x, y);
  } else if (ps->kind == FT_R2C) {
    ft_r2c_pairs(ps, begin, end, x, y);
  } else {
    ft_c2r_pairs(ps, begin, end, x, y);
  }
  free(x);
}

/* ---- arguments -------------------------------------------------------------------- */

typedef struct {
  int kind;
  const tpu_tensor_t* x;
  const tpu_tensor_t* out;
  int k;                  /* dims of the signal S (complex shape for c2c/c2r) */
  int64_t S[TPU_MAX_DIMS];
  int nd;
  int dims[TPU_MAX_DIMS];
  int norm;
  bool forward, onesided;
  int64_t last;           /* c2r: last_dim_size */
} ft_args_t;

static const char* ft_shape(char* buf, size_t cap, const int64_t* s, int n) {
  size_t len = 0;
  len += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && len < cap; ++i)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (len < cap) snprintf(buf + len, cap - len, "]");
  return buf;
}

static tpu_status_t ft_parse(const tpu_k_call_t* call, int kind, ft_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  const tpu_tensor_t* x = tpu_ku_tensor(call, 0);
  if (!x || call->num_args < 4) return TPU_KU_INVALID(call, "expected (self, dim, normalization, %s)",
                                                      kind == FT_C2C ? "forward" : kind == FT_R2C ? "onesided"
                                                                                                  : "last_dim_size");
  if (x->dtype != TPU_DTYPE_F32 && x->dtype != TPU_DTYPE_F64) return tpu_ku_unsupported_dtype(call, x->dtype);
  a->x = x;
  char b1[160], b2[160];
  if (kind == FT_R2C) {
    a->k = x->ndim;
  } else {
    if (x->ndim < 1 || x->sizes[x->ndim - 1] != 2)
      return TPU_KU_INVALID(call, "expected the real view of a complex tensor (a last dim of size 2), got shape %s",
                            ft_shape(b1, sizeof b1, x->sizes, x->ndim));
    a->k = x->ndim - 1;
  }
  for (int i = 0; i < a->k; ++i) a->S[i] = x->sizes[i];
  if (call->args[1].kind != TPU_K_INTS) return TPU_KU_INVALID(call, "dim must be a list of ints");
  const int64_t nd = call->args[1].v.ints.len;
  if (nd > a->k || nd < 0)
    return TPU_KU_INVALID(call, "got %lld dims for a signal of %d dims", (long long)nd, a->k);
  if (nd == 0 && kind != FT_C2C) return TPU_KU_INVALID(call, "expects at least one dim to transform");
  a->nd = (int)nd;
  for (int i = 0; i < a->nd; ++i) {
    const int64_t d = call->args[1].v.ints.data[i];
    if (d < 0 || d >= a->k)
      return tpu_status_annotate(TPU_ERROR(TPU_STATUS_OUT_OF_RANGE,
                                           "Dimension out of range (expected to be in range of [0, %d], but got %lld)",
                                           a->k - 1, (long long)d),
                                 "%s", call->op);
    for (int j = 0; j < i; ++j)
      if (a->dims[j] == d) return TPU_KU_INVALID(call, "dim %lld appears more than once in dim", (long long)d);
    a->dims[i] = (int)d;
  }
  const int64_t norm = tpu_ku_int(call, 2, -1);
  if (norm < 0 || norm > 2)
    return TPU_KU_INVALID(call, "normalization must be 0 (none), 1 (1/sqrt(n)) or 2 (1/n), got %lld", (long long)norm);
  a->norm = (int)norm;
  a->forward = tpu_ku_bool(call, 3, true);
  a->onesided = tpu_ku_bool(call, 3, true);
  a->last = tpu_ku_int(call, 3, 0);
  /* The output's shape. */
  int64_t O[TPU_MAX_DIMS];
  int on = a->k;
  for (int i = 0; i < a->k; ++i) O[i] = a->S[i];
  const int dl = a->nd ? a->dims[a->nd - 1] : 0;
  if (kind == FT_R2C) {
    if (a->onesided) O[dl] = a->S[dl] / 2 + 1;
    O[on++] = 2;
  } else if (kind == FT_C2R) {
    if (a->last < 0) return TPU_KU_INVALID(call, "last_dim_size must be non-negative, got %lld", (long long)a->last);
    O[dl] = a->last;
  } else {
    O[on++] = 2;
  }
  int64_t onumel = 1;
  for (int i = 0; i < on; ++i) onumel *= O[i];
  if (kind == FT_C2R && onumel > 0 && a->S[dl] < a->last / 2 + 1)
    return TPU_KU_INVALID(call, "input of shape %s has %lld entries along dim %d, fewer than the %lld "
                          "(last_dim_size // 2 + 1) that a last_dim_size of %lld reads",
                          ft_shape(b1, sizeof b1, a->S, a->k), (long long)a->S[dl], dl,
                          (long long)(a->last / 2 + 1), (long long)a->last);
  if (kind == FT_R2C && onumel > 0 && a->S[dl] == 0)
    return TPU_KU_INVALID(call, "Invalid number of data points (0) specified");
  for (int i = 0; i < a->nd; ++i) {
    const int64_t n = (kind == FT_C2R && i == a->nd - 1) ? a->last : a->S[a->dims[i]];
    if (n > FT_MAX_N)
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: a transform of length %lld is longer than the %lld supported",
                       call->op, (long long)n, (long long)FT_MAX_N);
  }
  if (call->outputs) {
    if (call->num_outputs < 1) return TPU_KU_INVALID(call, "expected one output");
    const tpu_tensor_t* o = &call->outputs[0];
    if (o->dtype != x->dtype)
      return TPU_KU_INVALID(call, "output must be %s (the input's dtype), got %s", tpu_dtype_name((tpu_dtype_t)x->dtype),
                            tpu_dtype_name((tpu_dtype_t)o->dtype));
    bool same = o->ndim == on;
    for (int i = 0; same && i < on; ++i) same = o->sizes[i] == O[i];
    if (!same)
      return TPU_KU_INVALID(call, "output of shape %s, expected %s", ft_shape(b1, sizeof b1, o->sizes, o->ndim),
                            ft_shape(b2, sizeof b2, O, on));
    a->out = o;
  }
  return TPU_OK;
}

/* The view of tensor t (complex real view when `complex`) as lines along
 * dim d over the dims < k other than d, with sizes `sz` (taken from the
 * tensor when NULL). */
static void ft_view_of(const tpu_tensor_t* t, bool complex, int k, int d, const int64_t* sz, ft_view_t* v) {
  memset(v, 0, sizeof(*v));
  const int64_t es = (int64_t)tpu_dtype_size((tpu_dtype_t)t->dtype);
  v->p = (char*)t->data;
  v->dt = t->dtype;
  v->st = t->strides[d] * es;
  v->im = complex ? t->strides[k] * es : 0;
  for (int i = 0; i < k; ++i) {
    if (i == d) continue;
    v->bsz[v->nb] = sz ? sz[i] : t->sizes[i];
    v->bst[v->nb] = t->strides[i] * es;
    v->nb++;
  }
}

#define FT_MAX_PLANS (3 * TPU_MAX_DIMS) /* a length per dim, two more per four-step dim */

typedef struct {
  int64_t n[FT_MAX_PLANS];
  ft_plan_t* p[FT_MAX_PLANS];
  int count;
} ft_plans_t;

static void ft_plans_free(ft_plans_t* ps) {
  for (int i = 0; i < ps->count; ++i) ft_plan_free(ps->p[i]);
  ps->count = 0;
}

static tpu_status_t ft_plan_get(const tpu_k_call_t* call, ft_plans_t* ps, int64_t n, const ft_plan_t** out) {
  for (int i = 0; i < ps->count; ++i) {
    if (ps->n[i] == n) {
      *out = ps->p[i];
      return TPU_OK;
    }
  }
  if (ps->count == FT_MAX_PLANS) return TPU_ERROR(TPU_STATUS_INTERNAL, "%s: too many transform lengths", call->op);
  size_t bytes = 0;
  ft_plan_t* p = ft_plan_new(n, &bytes);
  if (!p)
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a workspace of %zu bytes (length %lld)",
                     call->op, bytes, (long long)n);
  ps->n[ps->count] = n;
  ps->p[ps->count++] = p;
  *out = p;
  return TPU_OK;
}

/* ---- four-step transforms of long lines ---------------------------------------------
 * A line of length n = n1 * n2 (n >= FT_FOUR_MIN, no prime factor above
 * FT_MAX_PRIME) is transformed as n2 transforms of length n1 over
 * t1 (t = n2 t1 + t2), a twiddle e^{-2 pi i t2 k1/n}, then n1 transforms of
 * length n2 over t2, the result k1 + n1 k2 (Bailey's four steps). The
 * sub-transforms' scratch stays in cache, the many short lines run in
 * parallel even for one long line, and the plans are of length ~sqrt(n).
 * The intermediate is a double array T[b][k1][t2] for a group of lines b.
 * The twiddles are hi[e / L] * lo[e % L], two tables of ~sqrt(n) entries. */
#define FT_FOUR_MIN 32768
#define FT_FOUR_T_BYTES ((int64_t)1 << 26) /* T's size per group of lines, at most (one line at least) */
#define FT_FOUR_COLS 8 /* columns (rows) of the n1 x n2 matrix per task */

enum { FT_IN_COMPLEX = 0, FT_IN_REAL = 1, FT_IN_HERM = 2 };

typedef struct {
  int64_t n, n1, n2, L;
  const ft_plan_t *p1, *p2;
  const fc_t *hi, *lo;
  const ft_view_t *src, *dst;
  int in_mode;
  bool out_real;
  int64_t nout;          /* complex output: entries stored */
  bool conj_in, conj_out;
  double scale;
  fc_t* T;
  int64_t b0;            /* the group's first line */
  int64_t cap;
  atomic_int oom;
} ft_four_t;

/* Step A on the columns t2 in [c0, c0 + nc) of line b: loaded together so
 * that each cache line of the input and of T is used whole. */
static void ft_four_a_cols(ft_four_t* f, int64_t b, int64_t c0, int nc, fc_t* xs, fc_t* y) {
  const ft_view_t* v = f->src;
  const int64_t n = f->n, n1 = f->n1, n2 = f->n2, h = n / 2 + 1, st = v->st, im = v->im, cap = f->cap;
  const double sg = f->conj_in ? -1.0 : 1.0;
  const char* base = ft_line(v, f->b0 + b);
  for (int64_t t1 = 0; t1 < n1; ++t1) {
    for (int c = 0; c < nc; ++c) {
      const int64_t t = n2 * t1 + c0 + c;
      fc_t z;
      if (f->in_mode == FT_IN_COMPLEX) {
        z.re = ft_ld(base + t * st, v->dt);
        z.im = ft_ld(base + t * st + im, v->dt);
      } else if (f->in_mode == FT_IN_REAL) {
        z.re = ft_ld(base + t * st, v->dt);
        z.im = 0.0;
      } else { /* the Hermitian signal whose first n/2+1 entries the line holds */
        const int64_t u = t < h ? t : n - t;
        z.re = ft_ld(base + u * st, v->dt);
        z.im = (u == 0 || 2 * u == n) ? 0.0 : ft_ld(base + u * st + im, v->dt);
        if (t >= h) z.im = -z.im;
      }
      z.im *= sg;
      xs[c * cap + t1] = z;
    }
  }
  const fc_t* r[FT_FOUR_COLS];
  int64_t q[FT_FOUR_COLS], rm[FT_FOUR_COLS], dq[FT_FOUR_COLS], dr[FT_FOUR_COLS]; /* t2 k1 = q L + rm */
  for (int c = 0; c < nc; ++c) {
    fc_t* x = xs + c * cap;
    const fc_t* res = ft_exec(f->p1, x, y);
    if (res != x) memcpy(x, res, (size_t)n1 * sizeof(fc_t));
    r[c] = x;
    q[c] = rm[c] = 0;
    dq[c] = (c0 + c) / f->L;
    dr[c] = (c0 + c) % f->L;
  }
  fc_t* T = f->T + b * n + c0;
  for (int64_t k1 = 0; k1 < n1; ++k1) {
    for (int c = 0; c < nc; ++c) {
      T[k1 * n2 + c] = fc_mul(r[c][k1], fc_mul(f->hi[q[c]], f->lo[rm[c]]));
      q[c] += dq[c];
      rm[c] += dr[c];
      if (rm[c] >= f->L) {
        rm[c] -= f->L;
        q[c]++;
      }
    }
  }
}

/* Step B on the rows k1 in [c0, c0 + nc) of line b. */
static void ft_four_b_rows(ft_four_t* f, int64_t b, int64_t c0, int nc, fc_t* xs, fc_t* y) {
  const ft_view_t* v = f->dst;
  const int64_t n = f->n, n1 = f->n1, n2 = f->n2, st = v->st, im = v->im, cap = f->cap;
  const double sc = f->scale, si = f->conj_out ? -f->scale : f->scale;
  fc_t* r[FT_FOUR_COLS];
  for (int c = 0; c < nc; ++c) {
    fc_t* x = xs + c * cap;
    memcpy(x, f->T + b * n + (c0 + c) * n2, (size_t)n2 * sizeof(fc_t));
    const fc_t* res = ft_exec(f->p2, x, y);
    if (res != x) memcpy(x, res, (size_t)n2 * sizeof(fc_t));
    r[c] = x;
  }
  char* base = ft_line(v, f->b0 + b);
  const int64_t lim = f->out_real ? n : f->nout; /* entries K = k1 + n1 k2 < lim are stored */
  for (int64_t k2 = 0; k2 < n2; ++k2) {
    const int64_t K0 = c0 + n1 * k2;
    if (K0 >= lim) break;
    const int cnt = lim - K0 < nc ? (int)(lim - K0) : nc;
    char* p = base + K0 * st;
    if (f->in_mode == FT_IN_REAL) /* bins 0 and n/2 of real data are exactly real, as on the CPU */
      for (int c = 0; c < cnt; ++c)
        if (K0 + c == 0 || 2 * (K0 + c) == n) r[c][k2].im = 0.0;
    if (v->dt == TPU_DTYPE_F32) {
      for (int c = 0; c < cnt; ++c) {
        *(float*)(p + c * st) = (float)(r[c][k2].re * sc);
        if (!f->out_real) *(float*)(p + c * st + im) = (float)(r[c][k2].im * si);
      }
    } else {
      for (int c = 0; c < cnt; ++c) {
        *(double*)(p + c * st) = r[c][k2].re * sc;
        if (!f->out_real) *(double*)(p + c * st + im) = r[c][k2].im * si;
      }
    }
  }
}

static void ft_four_step(void* ctx, int64_t begin, int64_t end, bool a) {
  ft_four_t* f = (ft_four_t*)ctx;
  fc_t* xs = (fc_t*)malloc((FT_FOUR_COLS + 1) * (size_t)f->cap * sizeof(fc_t));
  if (!xs) {
    atomic_store(&f->oom, 1);
    return;
  }
  fc_t* y = xs + FT_FOUR_COLS * f->cap;
  const int64_t cols = a ? f->n2 : f->n1, blocks = (cols + FT_FOUR_COLS - 1) / FT_FOUR_COLS;
  for (int64_t it = begin; it < end; ++it) {
    const int64_t b = it / blocks, c0 = (it % blocks) * FT_FOUR_COLS;
    const int nc = cols - c0 < FT_FOUR_COLS ? (int)(cols - c0) : FT_FOUR_COLS;
    if (a) {
      ft_four_a_cols(f, b, c0, nc, xs, y);
    } else {
      ft_four_b_rows(f, b, c0, nc, xs, y);
    }
  }
  free(xs);
}
static void ft_four_a(void* ctx, int64_t begin, int64_t end) { ft_four_step(ctx, begin, end, true); }
static void ft_four_b(void* ctx, int64_t begin, int64_t end) { ft_four_step(ctx, begin, end, false); }

/* n1 (~sqrt(n)) for a four-step split of n; 0 when n takes the one-plan path. */
static int64_t ft_four_split(int64_t n) {
  if (n < FT_FOUR_MIN) return 0;
  int rad[FT_MAX_STAGES];
  int64_t maxp;
  const int k = ft_factor(n, rad, &maxp);
  if (maxp > FT_MAX_PRIME || k > FT_MAX_STAGES) return 0;
  int64_t n1 = 1;
  for (int i = 0; i < k; ++i)
    if ((n1 * rad[i]) * (n1 * rad[i]) <= n) n1 *= rad[i];
  return n1 > 1 && n1 < n ? n1 : 0;
}

static double ft_cost(const ft_plan_t* P, int64_t cap) {
  double lg = 1.0;
  for (int64_t v = cap; v > 1; v /= 2) lg += 1.0;
  return (P->M ? 3.0 : 1.0) * 5.0 * (double)cap * lg;
}

static int64_t ft_grain(double cost, int64_t items) {
  const double g = 262144.0 / cost;
  return g < 1.0 ? 1 : (g > (double)items ? items : (int64_t)g);
}

static tpu_status_t ft_run_four(const tpu_k_call_t* call, ft_pass_t* ps, ft_plans_t* plans, int64_t n1) {
  ft_four_t f;
  memset(&f, 0, sizeof(f));
  const int64_t n = ps->n, n2 = n / n1;
  f.n = n;
  f.n1 = n1;
  f.n2 = n2;
  TPU_RETURN_IF_ERROR(ft_plan_get(call, plans, n1, &f.p1));
  TPU_RETURN_IF_ERROR(ft_plan_get(call, plans, n2, &f.p2));
  f.src = &ps->src;
  f.dst = &ps->dst;
  f.in_mode = ps->kind == FT_C2C ? FT_IN_COMPLEX : ps->kind == FT_R2C ? FT_IN_REAL : FT_IN_HERM;
  f.out_real = ps->kind == FT_C2R;
  f.nout = ps->kind == FT_R2C ? ps->nout : n;
  f.conj_in = ps->kind == FT_C2R || ps->inverse;
  f.conj_out = f.conj_in;
  f.scale = ps->scale;
  f.cap = n1 > n2 ? n1 : n2;
  if (f.p1->M > f.cap) f.cap = f.p1->M;
  if (f.p2->M > f.cap) f.cap = f.p2->M;
  int64_t L = 1;
  while (L * L < n) ++L;
  f.L = L;
  const int64_t nhi = n / L + 1;
  const int64_t group_max = FT_FOUR_T_BYTES / (n * (int64_t)sizeof(fc_t));
  const int64_t group = group_max < 1 ? 1 : (group_max > ps->lines ? ps->lines : group_max);
  const size_t tbytes = (size_t)(group * n) * sizeof(fc_t), wbytes = (size_t)(L + nhi) * sizeof(fc_t);
  fc_t* tw = (fc_t*)malloc(wbytes);
  f.T = (fc_t*)malloc(tbytes);
  if (!tw || !f.T) {
    free(tw);
    free(f.T);
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a workspace of %zu bytes (length %lld)",
                     call->op, tbytes + wbytes, (long long)n);
  }
  const double w = 6.283185307179586476925286766559 / (double)n;
  for (int64_t j = 0; j < L; ++j) {
    tw[j].re = cos(w * (double)j);
    tw[j].im = -sin(w * (double)j);
  }
  for (int64_t i = 0; i < nhi; ++i) {
    tw[L + i].re = cos(w * (double)(i * L));
    tw[L + i].im = -sin(w * (double)(i * L));
  }
  f.lo = tw;
  f.hi = tw + L;
  const int64_t ba = (n2 + FT_FOUR_COLS - 1) / FT_FOUR_COLS, bb = (n1 + FT_FOUR_COLS - 1) / FT_FOUR_COLS;
  const int64_t ga = ft_grain(FT_FOUR_COLS * (ft_cost(f.p1, f.cap) + 4.0 * (double)n1), group * ba);
  const int64_t gb = ft_grain(FT_FOUR_COLS * (ft_cost(f.p2, f.cap) + 2.0 * (double)n2), group * bb);
  atomic_init(&f.oom, 0);
  for (f.b0 = 0; f.b0 < ps->lines && !atomic_load(&f.oom); f.b0 += group) {
    const int64_t g = ps->lines - f.b0 < group ? ps->lines - f.b0 : group;
    tpu_parallel_for(call->pool, g * ba, ga, ft_four_a, &f);
    if (atomic_load(&f.oom)) break;
    tpu_parallel_for(call->pool, g * bb, gb, ft_four_b, &f);
  }
  free(tw);
  free(f.T);
  if (atomic_load(&f.oom))
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a scratch of %zu bytes (length %lld)",
                     call->op, (FT_FOUR_COLS + 1) * (size_t)f.cap * sizeof(fc_t), (long long)n);
  return TPU_OK;
}

/* Runs one pass: `lines` independent lines (pairs of lines for the real
 * kinds), long lines by four steps. */
static tpu_status_t ft_run_pass(const tpu_k_call_t* call, ft_pass_t* ps, ft_plans_t* plans) {
  if (ps->lines == 0) return TPU_OK;
  const int64_t n1 = ft_four_split(ps->n);
  if (n1) return ft_run_four(call, ps, plans, n1);
  TPU_RETURN_IF_ERROR(ft_plan_get(call, plans, ps->n, &ps->plan));
  const ft_plan_t* P = ps->plan;
  int64_t cap = P->M ? P->M : P->n;
  if (ps->kind == FT_C2R && cap < 2 * (ps->n / 2 + 1)) cap = 2 * (ps->n / 2 + 1);
  ps->cap = cap;
  atomic_init(&ps->oom, 0);
  const int64_t items = ps->kind == FT_C2C ? ps->lines : (ps->lines + 1) / 2;
  tpu_parallel_for(call->pool, items, ft_grain(ft_cost(P, cap), items), ft_chunk, ps);
  if (atomic_load(&ps->oom))
    return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a scratch of %zu bytes (length %lld)",
                     call->op, 2 * (size_t)cap * sizeof(fc_t), (long long)ps->n);
  return TPU_OK;
}

static double ft_scale(int norm, double n) {
  if (norm == 1) return 1.0 / sqrt(n);
  if (norm == 2) return 1.0 / n;
  return 1.0;
}

static void ft_copy_inner(void* ctx, char** ptrs, const int64_t* strides, int64_t count) {
  const size_t es = *(const size_t*)ctx;
  for (int64_t i = 0; i < count; ++i) memcpy(ptrs[0] + i * strides[0], ptrs[1] + i * strides[1], es);
}

static tpu_status_t ft_run_kind(const tpu_k_call_t* call, int kind) {
  ft_args_t a;
  TPU_RETURN_IF_ERROR(ft_parse(call, kind, &a));
  if (!a.out) return TPU_KU_INVALID(call, "expected one output");
  if (tpu_tensor_numel(a.out) == 0) return TPU_OK;
  const tpu_tensor_t* x = a.x;
  const tpu_tensor_t* out = a.out;
  if (a.nd == 0) { /* c2c over no dims: a copy */
    const tpu_tensor_t* ops[2] = {out, x};
    tpu_ku_iter_t it;
    TPU_RETURN_IF_ERROR(tpu_ku_iter_init(&it, 2, ops, call->op));
    size_t es = tpu_dtype_size((tpu_dtype_t)x->dtype);
    tpu_ku_iter_parallel(&it, call->pool, 65536, ft_copy_inner, &es);
    return TPU_OK;
  }
  double ntot = 1.0;
  for (int i = 0; i < a.nd; ++i)
    ntot *= (double)((kind == FT_C2R && i == a.nd - 1) ? a.last : a.S[a.dims[i]]);
  const double scale = ft_scale(a.norm, ntot);
  const int k = a.k;
  ft_plans_t plans;
  memset(&plans, 0, sizeof(plans));
  tpu_status_t st = TPU_OK;
  ft_pass_t ps;
  memset(&ps, 0, sizeof(ps));
  int64_t OS[TPU_MAX_DIMS]; /* the complex output's shape (c2c, r2c) */
  for (int i = 0; i < k; ++i) OS[i] = out->sizes[i];

  if (kind == FT_C2C || kind == FT_R2C) {
    /* First pass from the input into the output, then in place on the output. */
    for (int i = 0; i < a.nd && st == TPU_OK; ++i) {
      /* r2c transforms its last dim first (real -> complex), then the others. */
      const int d = kind == FT_R2C ? a.dims[(i + a.nd - 1) % a.nd] : a.dims[i];
      memset(&ps, 0, sizeof(ps));
      ps.kind = (kind == FT_R2C && i == 0) ? FT_R2C : FT_C2C;
      ps.n = a.S[d];
      ps.nout = OS[d];
      ps.inverse = kind == FT_C2C && !a.forward;
      ps.scale = i == a.nd - 1 ? scale : 1.0;
      if (i == 0) {
        ft_view_of(x, kind == FT_C2C, k, d, OS, &ps.src);
      } else {
        ft_view_of(out, true, k, d, NULL, &ps.src);
      }
      ft_view_of(out, true, k, d, NULL, &ps.dst);
      ps.lines = 1;
      for (int j = 0; j < k; ++j)
        if (j != d) ps.lines *= OS[j];
      st = ft_run_pass(call, &ps, &plans);
    }
    ft_plans_free(&plans);
    return st;
  }

  /* c2r: inverse c2c over dim[:-1] into a workspace of the half spectrum,
   * then the Hermitian inverse over the last dim into the output. */
  const int dl = a.dims[a.nd - 1];
  const int64_t h = a.last / 2 + 1;
  int64_t WS[TPU_MAX_DIMS + 1]; /* the workspace's complex shape: S with S[dl] = h */
  for (int i = 0; i < k; ++i) WS[i] = a.S[i];
  WS[dl] = h;
  tpu_tensor_t W;
  memset(&W, 0, sizeof(W));
  const tpu_tensor_t* src = x;
  if (a.nd > 1) {
    int64_t wn = 2;
    for (int i = 0; i < k; ++i) wn *= WS[i];
    const size_t es = tpu_dtype_size((tpu_dtype_t)x->dtype);
    const size_t wbytes = (size_t)wn * es;
    W.data = malloc(wbytes ? wbytes : 1);
    if (!W.data)
      return TPU_ERROR(TPU_STATUS_OUT_OF_MEMORY, "%s: out of host memory for a workspace of %zu bytes", call->op,
                       wbytes);
    W.dtype = x->dtype;
    W.ndim = k + 1;
    W.sizes[k] = 2;
    W.strides[k] = 1;
    int64_t s = 2;
    for (int i = k - 1; i >= 0; --i) {
      W.sizes[i] = WS[i];
      W.strides[i] = s;
      s *= WS[i];
    }
    for (int i = 0; i < a.nd - 1 && st == TPU_OK; ++i) {
      const int d = a.dims[i];
      memset(&ps, 0, sizeof(ps));
      ps.kind = FT_C2C;
      ps.n = a.S[d];
      ps.inverse = true;
      ps.scale = 1.0;
      ft_view_of(i == 0 ? x : &W, true, k, d, WS, &ps.src);
      ft_view_of(&W, true, k, d, NULL, &ps.dst);
      ps.lines = 1;
      for (int j = 0; j < k; ++j)
        if (j != d) ps.lines *= WS[j];
      st = ft_run_pass(call, &ps, &plans);
    }
    src = &W;
  }
  if (st == TPU_OK) {
    memset(&ps, 0, sizeof(ps));
    ps.kind = FT_C2R;
    ps.n = a.last;
    ps.scale = scale;
    ft_view_of(src, true, k, dl, WS, &ps.src);
    ft_view_of(out, false, k, dl, NULL, &ps.dst);
    ps.lines = 1;
    for (int j = 0; j < k; ++j)
      if (j != dl) ps.lines *= WS[j];
    st = ft_run_pass(call, &ps, &plans);
  }
  free(W.data);
  ft_plans_free(&plans);
  return st;
}

static tpu_status_t ft_c2c_check(const tpu_k_call_t* call) {
  ft_args_t a;
  return ft_parse(call, FT_C2C, &a);
}
static tpu_status_t ft_r2c_check(const tpu_k_call_t* call) {
  ft_args_t a;
  return ft_parse(call, FT_R2C, &a);
}
static tpu_status_t ft_c2r_check(const tpu_k_call_t* call) {
  ft_args_t a;
  return ft_parse(call, FT_C2R, &a);
}
static tpu_status_t ft_c2c_run(const tpu_k_call_t* call) { return ft_run_kind(call, FT_C2C); }
static tpu_status_t ft_r2c_run(const tpu_k_call_t* call) { return ft_run_kind(call, FT_R2C); }
static tpu_status_t ft_c2r_run(const tpu_k_call_t* call) { return ft_run_kind(call, FT_C2R); }

const tpu_k_entry_t tpu_k_fft_entries[] = {
    {"tpu::fft_c2c", ft_c2c_run, ft_c2c_check, 0, NULL},
    {"tpu::fft_r2c", ft_r2c_run, ft_r2c_check, 0, NULL},
    {"tpu::fft_c2r", ft_c2r_run, ft_c2r_check, 0, NULL},
};
const size_t tpu_k_fft_count = sizeof(tpu_k_fft_entries) / sizeof(tpu_k_fft_entries[0]);
