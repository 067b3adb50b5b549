{
  "includes": ["../../native/gyp/common.gypi"],
  "targets": [
    {
      "target_name": "k3_moe_stream",
      "sources": [
        "src/addon.cc",
        "src/arena.c",
        "src/ceiling.c",
        "src/compute_addon.cc",
        "src/crc32.c",
        "src/crc32_pclmul.c",
        "src/crc32_vpclmul.c",
        "src/direct_file.c",
        "src/moe_compute.c",
        "src/moe_mxfp4.c",
        "src/pool_bench.c",
        "src/read_pool.c",
        "src/resident_load.c",
        "src/synth_block.c",
        "src/trunk_check.c",
        "src/uring.c",
        "src/uring_reader.c"
      ],
      "include_dirs": [
        "include",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/mxfp4/package.json')), 'native', 'include')\")"
      ]
    }
  ]
}
