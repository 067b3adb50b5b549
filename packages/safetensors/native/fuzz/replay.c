/*
 * replay.c: a main() for the fuzz targets without libFuzzer: feeds each file named on the command
 * line to LLVMFuzzerTestOneInput once. Built with gcc -fsanitize=address,undefined by
 * test/sanitizers.test.ts to replay the inputs of fuzz/regressions/ (every finding the fuzzers
 * made), so a fix that comes undone fails the package tests.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *size = n;
    return buf;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        size_t size = 0;
        uint8_t *data = read_all(argv[i], &size);
        if (!data) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 2;
        }
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        printf("ok %s\n", argv[i]);
    }
    return 0;
}
