/* asan_driver.c: every MLA kernel at every SIMD level over odd shapes, for ASan/UBSan (see asan.sh). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "k3_mla.h"
extern k3_dense_api fake_api;
void fake_dense_init(int simd_level);
static float *rnd(size_t n) { float *p = malloc(n * sizeof(float)); for (size_t i = 0; i < n; i++) p[i] = rand() / (float)RAND_MAX - 0.5f; return p; }
int main(void) {
  /* a @k3/dense table that ends before the fields this addon calls (an older provider) is refused */
  fake_dense_init(0);
  k3_dense_api older = fake_api; older.struct_size = offsetof(k3_dense_api, dot_rows_f32);
  if (k3_mla_init(&older) == 0) { puts("mla accepted a table without dot_rows"); return 1; }
  older.struct_size = offsetof(k3_dense_api, gemm_acc_f32);
  if (k3_mla_init(&older) == 0) { puts("mla accepted a table without gemm_acc"); return 1; }
  size_t shapes[][5] = {{1,1,1,1,0},{3,4,40,32,5},{70,3,576,512,0},{9,2,33,17,130}};
  for (int lv = 0; lv < 3; lv++) { fake_dense_init(lv); k3_mla_init(&fake_api);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      size_t T = shapes[s][0], H = shapes[s][1], dq = shapes[s][2], dv = shapes[s][3], pos0 = shapes[s][4], S = pos0 + T;
      float *q = rnd(T*H*dq), *out = malloc(T*H*dv*4);
      float *lat = rnd(S*dq); uint16_t *lat16 = calloc(S*dq, 2);
      k3_mla_rows k = {lat, 0, 0, dq, 0}, v = {lat, 0, 0, dq, 0};
      if (dv <= dq) { k3_mla_attend(q, T, H, dq, dv, &k, &v, pos0, 0.1f, out); k.data = lat16; k.bf16 = 1; v.data = lat16; v.bf16 = 1; k3_mla_attend(q, T, H, dq, dv, &k, &v, pos0, 0.1f, out); }
      float *K = rnd(S*H*dq), *V = rnd(S*H*dv);
      k3_mla_rows ke = {K, 0, 0, H*dq, dq}, ve = {V, 0, 0, H*dv, dv};
      k3_mla_attend(q, T, H, dq, dv, &ke, &ve, pos0, 0.1f, out);
      size_t n = 5, vv = 7, L = dq; float *kvb = rnd(H*(n+vv)*L), *qa = rnd(T*H*n), *qo = malloc(T*H*L*4), *po = malloc(T*H*vv*4);
      k3_mla_absorb(qa, T, H, H*n, n, kvb, 0, n, vv, L, qo, H*L, L); k3_mla_project(qo, T, H, H*L, L, kvb, 0, n, vv, L, po, H*vv, vv);
      free(q); free(out); free(lat); free(lat16); free(K); free(V); free(kvb); free(qa); free(qo); free(po);
    } }
  puts("mla asan ok"); return 0;
}
