{
  "includes": ["../../native/gyp/common.gypi"],
  "targets": [
    {
      "target_name": "k3_mla",
      "sources": [
        "src/addon.cc",
        "src/api.c",
        "src/mla_attend.c",
        "src/mla_absorb.c"
      ],
      "include_dirs": [
        "include",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")"
      ]
    }
  ]
}
