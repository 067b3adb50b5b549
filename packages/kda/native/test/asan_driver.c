/* asan_driver.c: every KDA kernel at every SIMD level over odd shapes, for ASan/UBSan (see asan.sh). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "k3_kda.h"
extern k3_dense_api fake_api;
void fake_dense_init(int simd_level);
static float *rnd(size_t n, float lo, float hi) { float *p = malloc(n * sizeof(float)); for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (rand() / (float)RAND_MAX); return p; }
int main(void) {
  /* a @k3/dense table that ends before the fields this addon calls (an older provider) is refused */
  fake_dense_init(0);
  k3_dense_api older = fake_api; older.struct_size = offsetof(k3_dense_api, dot_rows_f32);
  if (k3_kda_init(&older) == 0) { puts("kda accepted a table without dot_rows"); return 1; }
  older.struct_size = offsetof(k3_dense_api, gemm_acc_f32);
  if (k3_kda_init(&older) == 0) { puts("kda accepted a table without gemm_acc"); return 1; }
  size_t shapes[][5] = {{1,1,1,1,1},{5,2,3,7,2},{70,3,16,16,16},{33,2,40,24,7},{130,1,128,128,64},{9,2,17,33,100}};
  for (int lv = 0; lv < 3; lv++) { fake_dense_init(lv); k3_kda_init(&fake_api);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      size_t T = shapes[s][0], H = shapes[s][1], dk = shapes[s][2], dv = shapes[s][3], C = shapes[s][4];
      float *q = rnd(T*H*dk, -.1f, .1f), *k = rnd(T*H*dk, -.1f, .1f), *v = rnd(T*H*dv, -1, 1), *g = rnd(T*H*dk, -5, 0), *b = rnd(T*H, 0, 1);
      float *S = rnd(H*dk*dv, -1, 1), *o = malloc(T*H*dv*4); uint16_t *S16 = calloc(H*dk*dv, 2);
      k3_kda_recurrent(q, k, v, g, b, S, 0, o, T, H, dk, dv); k3_kda_chunked(q, k, v, g, b, S, 0, o, T, H, dk, dv, C);
      k3_kda_recurrent(q, k, v, g, b, S16, 1, o, T, H, dk, dv); k3_kda_chunked(q, k, v, g, b, S16, 1, o, T, H, dk, dv, C);
      float *x = rnd(T*dk, -1, 1), *w = rnd(dk*4, -1, 1), *st = rnd(3*dk, -1, 1), *co = malloc(T*dk*4);
      k3_kda_short_conv(x, w, st, co, T, dk, 4);
      float *z = rnd(T*H*dk, -3, 3), *dt = rnd(H*dk, -1, 1), *al = rnd(H, -1, 1), *gg = malloc(T*H*dk*4);
      k3_kda_gate(z, dt, al, gg, T, H, dk, 0, -5); k3_kda_gate(z, dt, al, gg, T, H, dk, 1, -5);
      free(q); free(k); free(v); free(g); free(b); free(S); free(o); free(S16); free(x); free(w); free(st); free(co); free(z); free(dt); free(al); free(gg);
    } }
  puts("kda asan ok"); return 0;
}
