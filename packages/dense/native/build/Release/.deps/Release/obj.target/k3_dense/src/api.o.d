cmd_Release/obj.target/k3_dense/src/api.o := cc -o Release/obj.target/k3_dense/src/api.o ../src/api.c '-DNODE_GYP_MODULE_NAME=k3_dense' '-DUSING_UV_SHARED=1' '-DUSING_V8_SHARED=1' '-DV8_DEPRECATION_WARNINGS=1' '-D_GLIBCXX_USE_CXX11_ABI=1' '-D_FILE_OFFSET_BITS=64' '-D_LARGEFILE_SOURCE' '-D__STDC_FORMAT_MACROS' '-DOPENSSL_NO_PINSHARED' '-DOPENSSL_THREADS' '-DNAPI_VERSION=8' '-DNAPI_DISABLE_CPP_EXCEPTIONS' '-DBUILDING_NODE_EXTENSION' -I/usr/include/node -I/usr/src -I/usr/deps/openssl/config -I/usr/deps/openssl/openssl/include -I/usr/deps/uv/include -I/usr/deps/zlib -I/usr/deps/v8/include -I../include -I../../../../node_modules/.pnpm/node-addon-api@8.9.2/node_modules/node-addon-api -I/work/main/packages/native/include  -fPIC -pthread -Wall -Wextra -Wno-unused-parameter -m64 -O3 -fno-omit-frame-pointer -std=gnu11 -O3 -ffp-contract=off -fno-math-errno -Wall -Wextra -MMD -MF ./Release/.deps/Release/obj.target/k3_dense/src/api.o.d.raw   -c
Release/obj.target/k3_dense/src/api.o: ../src/api.c ../include/k3_dense.h \
 ../src/cpu.h ../src/pool.h ../src/gemv_bf16.h
../src/api.c:
../include/k3_dense.h:
../src/cpu.h:
../src/pool.h:
../src/gemv_bf16.h:
