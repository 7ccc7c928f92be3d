#!/usr/bin/env bash
# Packs what benchmarks/device/device_vllm.sh needs into .vc1/p1, .vc2/p2 and .vc3/p3 (each under what one device call
# carries beside the working tree and .whl/.devtok), with .vc3/blob.sha256; run here, where pip reaches the registry:
#   bash benchmarks/device/device_vllm_pack.sh
# The tar holds vllm_024.tar.xz (vLLM 0.24.0's wheel contents without _vllm_fa2_C and _moe_C, xz -6) and vdeps/ (the
# wheels of benchmarks/device/device_vllm_deps.txt: cp312, manylinux x86-64, resolved with `uv pip compile` for
# vllm==0.24.0 with every package the machine image already has, this project's .whl and the GPU kernel packages
# vLLM imports only when used overridden away; xgrammar 0.2.8 with apache-tvm-ffi 0.1.15.post2 in place of the
# resolved 0.2.5.post1/0.1.9, a 47 MB wheel).
set -eu
W=$(mktemp -d)
PIP=".venv/bin/pip"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
  --platform manylinux1_x86_64)
PIP_CONSTRAINT=/dev/null "$PIP" download -q --no-deps "${plat[@]}" -d "$W/wheel" vllm==0.24.0
mkdir -p "$W/x" "$W/blob/vdeps"
(cd "$W/x" && unzip -q "$W"/wheel/vllm-0.24.0-*.whl \
  && rm vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so \
  && tar -cf - vllm vllm-0.24.0.dist-info | xz -T2 -6 > "$W/blob/vllm_024.tar.xz")
sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/' benchmarks/device/device_vllm_deps.txt > "$W/deps.txt"
PIP_CONSTRAINT=/dev/null "$PIP" download -q --no-deps "${plat[@]}" -d "$W/blob/vdeps" -r "$W/deps.txt"
tar -cf "$W/blob.tar" -C "$W/blob" .
rm -rf .vc1 .vc2 .vc3 && mkdir .vc1 .vc2 .vc3
head -c 61000000 "$W/blob.tar" > .vc1/p1
tail -c +61000001 "$W/blob.tar" | head -c 61000000 > .vc2/p2
tail -c +122000001 "$W/blob.tar" > .vc3/p3
(cd "$W" && sha256sum blob.tar | cut -d' ' -f1) > .vc3/blob.sha256
for d in .vc1 .vc2 .vc3; do grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude; done
ls -l .vc1 .vc2 .vc3
rm -rf "$W"
