/*
 * kda_chunked.c: the chunkwise WY/UT form of the KDA recurrence (docs/architecture.md §2.6), per head.
 *
 * For a chunk of n tokens with state S0 and Gamma_i = sum_{s<=i} g_s (in-chunk, inclusive):
 *   M[i][j] = beta_i sum_d k_i k_j e^(Gamma_i - Gamma_j)   j < i   (strictly lower)
 *   P[i][j] =        sum_d q_i k_j e^(Gamma_i - Gamma_j)   j <= i  (keeps the diagonal)
 *   R_i     = beta_i (v_i - (k_i . e^Gamma_i) S0)
 *   V_new   = (I + M)^-1 R                 (forward substitution: V_new_i = R_i - sum_{j<i} M_ij V_new_j,
 *                                           j ascending; earlier sub-blocks as one small product)
 *             [= U - W S0 of the spec: (I+M)^-1 diag(beta) (V - (e^Gamma . K) S0)]
 *   O       = (Q . e^Gamma) S0 + P V_new
 *   S_end   = diag(e^Gamma_last) S0 + (K . e^(Gamma_last - Gamma))^T V_new
 *
 * Every decay is e^(Gamma_a - Gamma_b) with b <= a (<= 1), never e^-Gamma alone, which overflows
 * (Gamma reaches -320 in 64 K3 steps). To keep the exp count at O(n dk) instead of O(n^2 dk), the
 * chunk is cut into sub-blocks of SUB tokens; for i in block I (first index r):
 *   e^(Gamma_i - Gamma_j) = e^(Gamma_i - Gamma_r) * e^(Gamma_r - Gamma_j)
 * For j < r both factors are <= 1. For j in I the second factor is >= 1 but at most e^FACTOR_BOUND:
 * a block whose Gamma spans more than FACTOR_BOUND in some channel takes direct exps for its own
 * pairs instead (decided from the data alone, so every SIMD level and thread count decides alike).
 * M and P rows of a block are then two small products. The order of every operation is fixed
 * (kda_simd.h; the small products are @k3/dense's gemm_acc and dot_rows, k3_dense.h), so all SIMD levels agree
 * bit for bit.
 */
#include <stdlib.h>
#include <string.h>
#include "k3_kda.h"
#include "kda_simd.h"
#include "kda_fpmode.h"
#include "state_bf16.h"

#define SUB 16

/* C[m][n] += A[m][k] B[k][n]: @k3/dense's small GEMM (order in k3_dense.h: one fmaf chain per
   element, p ascending), on this task's thread. */
static void gemm_acc(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                     size_t ldc) {
    k3_kda_dense()->gemm_acc_f32(m, n, k, A, lda, B, ldb, C, ldc);
}

/* Largest |Gamma_i - Gamma_r| (per channel) a sub-block may span and still be factored around r:
   factors stay within [e^-64, e^64] = [1.6e-28, 6.2e27], normal fp32 with headroom for |k|, |q| up
   to 5e10 before K_j e^(Gamma_r - Gamma_j) could overflow, and far above k3_expf's flush at -87. */
#define FACTOR_BOUND 64.0f

typedef struct {
    float *Q, *K, *V, *G;   /* the chunk, gathered: [n][dk] / [n][dv] */
    float *Gam, *eG;        /* Gamma and e^Gamma [n][dk] */
    float *KQ;              /* [2C][dk]: K . e^Gamma rows, then Q . e^Gamma rows (Kg, Qg point in) */
    float *Kg, *Qg;         /* this chunk's [n][dk] parts of KQ */
    float *M, *P;           /* [C][C]; M is stored negated (-M), ready for the forward substitution */
    float *RO;              /* [2C][dv]: R rows, then output rows (R, Ob point in) */
    float *R, *Ob;          /* [n][dv]: R then V_new; the chunk output */
    float *Bt;              /* [dk][C]: K_j . e^(Gamma_r - Gamma_j), transposed, around row bt_ref */
    size_t bt_cols, bt_ref; /* Bt holds columns [0, bt_cols) around row bt_ref */
    float *Fa, *Ka, *Qa;    /* [SUB][dk]: e^(Gamma_i - Gamma_r), K_i . Fa, Q_i . Fa */
    float *E, *KE;          /* [dk] */
    float *beta;            /* [C] */
    float *S16;             /* widened bf16 state [dk][dv] */
} chunk_scratch;

static size_t scratch_floats(size_t C, size_t dk, size_t dv) {
    return 7 * C * dk + 3 * C * dv + 2 * C * C + dk * C + 3 * SUB * dk + 2 * dk + C + dk * dv;
}

static chunk_scratch carve(float *p, size_t C, size_t dk, size_t dv) {
    chunk_scratch s;
    s.Q = p; p += C * dk;
    s.K = p; p += C * dk;
    s.G = p; p += C * dk;
    s.Gam = p; p += C * dk;
    s.eG = p; p += C * dk;
    s.KQ = p; p += 2 * C * dk;
    s.Kg = s.KQ;
    s.Qg = s.KQ + C * dk;
    s.V = p; p += C * dv;
    s.M = p; p += C * C;
    s.P = p; p += C * C;
    s.RO = p; p += 2 * C * dv;
    s.R = s.RO;
    s.Ob = s.RO + C * dv;
    s.Bt = p; p += dk * C;
    s.Fa = p; p += SUB * dk;
    s.Ka = p; p += SUB * dk;
    s.Qa = p; p += SUB * dk;
    s.E = p; p += dk;
    s.KE = p; p += dk;
    s.beta = p; p += C;
    s.S16 = p;
    return s;
}

typedef struct {
    const kda_kernels *kern;
    const float *q, *k, *v, *g, *beta;
    void *S;
    int state_bf16;
    float *o;
    size_t T, H, dk, dv, C;
    float *scratch;
    size_t per_task, n_tasks;
} chunked_job;

/* Pairs (i, j <= i) of one sub-block [b0, b1) by direct exps: the fallback when its decays are too
   steep to factor around b0 (see FACTOR_BOUND). For row i the columns KE_j = K_j . e^(Gamma_i -
   Gamma_j), j = b0..i, are built in Fa (free once the block's products have run); P's and M's
   entries of the row are then one @k3/dense dot_rows call each (the gemv order). */
static void diag_block_direct(const kda_kernels *kern, chunk_scratch *s, size_t b0, size_t b1, size_t dk, size_t C) {
    const k3_dense_api *dense = k3_kda_dense();
    float *KE = s->Fa;
    for (size_t i = b0; i < b1; i++) {
        for (size_t j = b0; j <= i; j++) {
            float *ke = KE + (j - b0) * dk;
            kern->exp_diff(s->Gam + i * dk, s->Gam + j * dk, s->E, dk);
            for (size_t d = 0; d < dk; d++) ke[d] = s->K[j * dk + d] * s->E[d];
        }
        dense->dot_rows_f32(1, i - b0 + 1, dk, s->Q + i * dk, dk, KE, dk, s->P + i * C + b0, C);
        if (i > b0) dense->dot_rows_f32(1, i - b0, dk, s->K + i * dk, dk, KE, dk, s->M + i * C + b0, C);
        s->M[i * C + i] = 0.0f;
    }
}

/* True when every Gamma_i - Gamma_b0 of the sub-block lies in [-FACTOR_BOUND, FACTOR_BOUND] (and
   none is NaN). Per-channel running min / max / x*0 (NaN-sticky) in E, KE, Fa: element-wise, so
   the compiler vectorises it; one scalar pass over dk at the end. */
static int block_factorable(chunk_scratch *s, size_t b0, size_t b1, size_t dk) {
    const float *G0 = s->Gam + b0 * dk;
    float *lo = s->E, *hi = s->KE, *nan = s->Fa;
    for (size_t d = 0; d < dk; d++) lo[d] = hi[d] = nan[d] = 0.0f;
    for (size_t i = b0 + 1; i < b1; i++)
        for (size_t d = 0; d < dk; d++) {
            float x = s->Gam[i * dk + d] - G0[d];
            lo[d] = x < lo[d] ? x : lo[d];
            hi[d] = x > hi[d] ? x : hi[d];
            nan[d] = nan[d] + x * 0.0f;
        }
    int ok = 1;
    for (size_t d = 0; d < dk; d++) ok &= lo[d] >= -FACTOR_BOUND && hi[d] <= FACTOR_BOUND && nan[d] == 0.0f;
    return ok;
}

/* Brings Bt to reference row r with columns [0, cols): the columns it already holds (around an
   earlier row rp <= r) are rescaled per channel by e^(Gamma_r - Gamma_rp) <= 1, so only the new
   columns take exps (about C + n rows of exps per chunk instead of one per (block, column)). When
   that rescale flushes to 0 (Gamma_r - Gamma_rp <= -87), the columns it zeroes were at most
   e^(-87 + FACTOR_BOUND) = 1e-10 of |k|: below every tolerance. */
static void bt_around(const kda_kernels *kern, chunk_scratch *s, size_t r, size_t cols, size_t dk, size_t C) {
    const float *Gr = s->Gam + r * dk;
    size_t have = s->bt_cols < cols ? s->bt_cols : cols;
    if (have > 0 && s->bt_ref != r) {
        kern->exp_diff(Gr, s->Gam + s->bt_ref * dk, s->E, dk);
        for (size_t d = 0; d < dk; d++) {
            float f = s->E[d];
            float *row = s->Bt + d * C;
            for (size_t j = 0; j < have; j++) row[j] = row[j] * f;
        }
    }
    for (size_t j = have; j < cols; j++) {
        kern->exp_diff(Gr, s->Gam + j * dk, s->E, dk);
        for (size_t d = 0; d < dk; d++) s->Bt[d * C + j] = s->K[j * dk + d] * s->E[d];
    }
    s->bt_cols = cols;
    s->bt_ref = r;
}

/* M and P of one chunk (n tokens), one sub-block of rows at a time, around r = b0 (its first row):
     e^(Gamma_i - Gamma_j) = e^(Gamma_i - Gamma_r) * e^(Gamma_r - Gamma_j)
   Row factors Fa_i = e^(Gamma_i - Gamma_r) (<= 1 for log decays g <= 0); column factors
   e^(Gamma_r - Gamma_j) <= 1 for the earlier columns j < r, and <= e^FACTOR_BOUND inside the block
   (checked, else that block's pairs take direct exps). So each block is one small product
   [m x dk] x [dk x b1] with m + b1 rows of exps, instead of an exp per (i, j, d). */
static void build_m_p(const kda_kernels *kern, chunk_scratch *s, size_t n, size_t dk, size_t C) {
    memset(s->M, 0, C * C * sizeof(float));
    memset(s->P, 0, C * C * sizeof(float));
    s->bt_cols = 0;
    s->bt_ref = 0;
    for (size_t b0 = 0; b0 < n; b0 += SUB) {
        size_t b1 = b0 + SUB < n ? b0 + SUB : n;
        size_t m = b1 - b0;
        const float *Gr = s->Gam + b0 * dk;
        int factored = block_factorable(s, b0, b1, dk);
        size_t cols = factored ? b1 : b0;
        for (size_t i = b0; i < b1; i++) {
            float *fa = s->Fa + (i - b0) * dk;
            kern->exp_diff(s->Gam + i * dk, Gr, fa, dk);
            for (size_t d = 0; d < dk; d++) {
                s->Ka[(i - b0) * dk + d] = s->K[i * dk + d] * fa[d];
                s->Qa[(i - b0) * dk + d] = s->Q[i * dk + d] * fa[d];
            }
        }
        bt_around(kern, s, b0, cols, dk, C);
        if (cols > 0) {
            gemm_acc(m, cols, dk, s->Ka, dk, s->Bt, C, s->M + b0 * C, C);
            gemm_acc(m, cols, dk, s->Qa, dk, s->Bt, C, s->P + b0 * C, C);
        }
        if (factored) /* the product also filled the upper triangle of the diagonal block */
            for (size_t i = b0; i < b1; i++)
                for (size_t j = i; j < b1; j++) {
                    s->M[i * C + j] = 0.0f;
                    if (j > i) s->P[i * C + j] = 0.0f;
                }
        else
            diag_block_direct(kern, s, b0, b1, dk, C);
        for (size_t i = b0; i < b1; i++)
            for (size_t j = 0; j < i; j++) s->M[i * C + j] = -(s->beta[i] * s->M[i * C + j]);
    }
}

static void chunk_step(const kda_kernels *kern, chunk_scratch *s, float *S, size_t n, size_t dk, size_t dv, size_t C) {
    /* Gamma: inclusive cumulative sum of the log decays, then e^Gamma (<= 1) */
    memcpy(s->Gam, s->G, dk * sizeof(float));
    for (size_t i = 1; i < n; i++)
        for (size_t d = 0; d < dk; d++) s->Gam[i * dk + d] = s->Gam[(i - 1) * dk + d] + s->G[i * dk + d];
    kern->exp_diff(s->Gam, NULL, s->eG, n * dk);
    /* Kg rows then Qg rows, and their products with S0 (R rows then Ob rows) back to back, so both
       come from one product [2n x dk] x S0 that reads S0 once (the Qg/Kg and R/Ob areas are adjacent) */
    s->Kg = s->KQ;
    s->Qg = s->KQ + n * dk;
    s->R = s->RO;
    s->Ob = s->RO + n * dv;
    for (size_t x = 0; x < n * dk; x++) {
        s->Qg[x] = s->Q[x] * s->eG[x];
        s->Kg[x] = s->K[x] * s->eG[x];
    }
    build_m_p(kern, s, n, dk, C);
    /* R = beta (V - Kg S0), then V_new = (I + M)^-1 R by forward substitution (in place in R) */
    memset(s->R, 0, 2 * n * dv * sizeof(float));
    gemm_acc(2 * n, dv, dk, s->Kg, dk, S, dv, s->R, dv); /* R <- Kg S0, Ob <- Qg S0 */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dv; j++) s->R[i * dv + j] = s->beta[i] * (s->V[i * dv + j] - s->R[i * dv + j]);
    /* row i accumulates -M_ij V_new_j for j = 0, 1, ..., i-1 in that order: the earlier sub-blocks as one
       small product (its p loop runs j ascending), then its own sub-block's earlier rows, one small
       product per row (they are final by then: row i reads rows b0..i-1 and writes row i only) */
    for (size_t b0 = 0; b0 < n; b0 += SUB) {
        size_t b1 = b0 + SUB < n ? b0 + SUB : n;
        if (b0 > 0) gemm_acc(b1 - b0, dv, b0, s->M + b0 * C, C, s->R, dv, s->R + b0 * dv, dv);
        for (size_t i = b0 + 1; i < b1; i++) gemm_acc(1, dv, i - b0, s->M + i * C + b0, C, s->R + b0 * dv, dv, s->R + i * dv, dv);
    }
    /* O = Qg S0 (already in Ob) + P V_new */
    /* P is lower triangular: rows of sub-block [b0, b1) stop at column b1 - 1 */
    for (size_t b0 = 0; b0 < n; b0 += SUB) {
        size_t b1 = b0 + SUB < n ? b0 + SUB : n;
        gemm_acc(b1 - b0, dv, b1, s->P + b0 * C, C, s->R, dv, s->Ob + b0 * dv, dv);
    }
    /* S_end = diag(e^Gamma_last) S0 + (K . e^(Gamma_last - Gamma))^T V_new */
    bt_around(kern, s, n - 1, n, dk, C); /* Bt[d][i] = K_i e^(Gamma_last - Gamma_i), from M/P's columns */
    for (size_t d = 0; d < dk; d++) {
        float decay = s->eG[(n - 1) * dk + d];
        for (size_t j = 0; j < dv; j++) S[d * dv + j] = S[d * dv + j] * decay;
    }
    gemm_acc(dk, dv, n, s->Bt, C, s->R, dv, S, dv);
}

/* Rows of different tokens are H * dk floats apart (a page or more), where the hardware prefetcher
   does not follow; the gather asks for the rows GATHER_AHEAD tokens ahead itself (a hint only). */
#define GATHER_AHEAD 6

static void prefetch_rows(const chunked_job *job, size_t at) {
    for (size_t d = 0; d < job->dk; d += 16) {
        __builtin_prefetch(job->q + at * job->dk + d);
        __builtin_prefetch(job->k + at * job->dk + d);
        __builtin_prefetch(job->g + at * job->dk + d);
    }
    for (size_t d = 0; d < job->dv; d += 16) __builtin_prefetch(job->v + at * job->dv + d);
}

static void chunked_head(const chunked_job *job, size_t h, float *scratch) {
    size_t H = job->H, dk = job->dk, dv = job->dv, C = job->C;
    size_t state_len = dk * dv;
    chunk_scratch s = carve(scratch, C, dk, dv);
    float *S;
    if (job->state_bf16) {
        S = s.S16;
        kda_bf16_widen((const uint16_t *)job->S + h * state_len, S, state_len);
    } else {
        S = (float *)job->S + h * state_len;
    }
    for (size_t c0 = 0; c0 < job->T; c0 += C) {
        size_t n = job->T - c0 < C ? job->T - c0 : C;
        for (size_t i = 0; i < n; i++) {
            size_t at = (c0 + i) * H + h;
            if (i + GATHER_AHEAD < n) prefetch_rows(job, at + GATHER_AHEAD * H);
            memcpy(s.Q + i * dk, job->q + at * dk, dk * sizeof(float));
            memcpy(s.K + i * dk, job->k + at * dk, dk * sizeof(float));
            memcpy(s.G + i * dk, job->g + at * dk, dk * sizeof(float));
            memcpy(s.V + i * dv, job->v + at * dv, dv * sizeof(float));
            s.beta[i] = job->beta[at];
        }
        chunk_step(job->kern, &s, S, n, dk, dv, C);
        for (size_t i = 0; i < n; i++) memcpy(job->o + ((c0 + i) * H + h) * dv, s.Ob + i * dv, dv * sizeof(float));
    }
    if (job->state_bf16) kda_bf16_round(S, (uint16_t *)job->S + h * state_len, state_len);
}

/* Task i runs heads i, i + n_tasks, ... with one scratch (every buffer is rewritten per chunk). */
static void chunked_task(void *ctx, int task) {
    const chunked_job *job = ctx;
    unsigned mode = kda_flush_subnormals();
    for (size_t h = (size_t)task; h < job->H; h += job->n_tasks)
        chunked_head(job, h, job->scratch + (size_t)task * job->per_task);
    kda_restore_fpmode(mode);
}

int k3_kda_chunked(const float *q, const float *k, const float *v, const float *g, const float *beta, void *S,
                   int state_bf16, float *o, size_t T, size_t H, size_t dk, size_t dv, size_t chunk) {
    if (T == 0) return 0;
    size_t C = chunk < T ? chunk : T;
    size_t per_task = scratch_floats(C, dk, dv);
    size_t n_tasks = (size_t)k3_kda_dense()->thread_count() * 4;
    if (n_tasks > H) n_tasks = H;
    float *scratch = malloc(n_tasks * per_task * sizeof(float));
    if (!scratch) return -1;
    chunked_job job = {kda_kernels_current(), q, k, v, g, beta, S, state_bf16, o, T, H, dk, dv, C, scratch, per_task, n_tasks};
    k3_kda_dense()->parallel_for((int)n_tasks, chunked_task, &job);
    free(scratch);
    return 0;
}
