#!/usr/bin/env bash
# Packs a CUDA build's GPU programs, with the shared libraries that a machine
# without trident's Debian packages lacks, into one self-contained tarball.
#
# For a GPU machine that has the CUDA 13 driver, runtime, cuBLAS and NCCL but
# not the -dev packages that scripts/install_deps.sh installs (a lent cloud GPU
# whose image is not Debian 12): build here, run there.
#
#   cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON \
#         -DCMAKE_CUDA_ARCHITECTURES=90 -DTRIDENT_WITH_PARQUET=OFF
#   ninja -C build-dev trident train_bench cuda_device_test cuda_consistency_test \
#         cuda_training_test nccl_communicator_test
#   scripts/gpu_bundle.sh build-dev .devpack/trident-gpu.tar.xz
#
# Unpacked, the tarball holds bin/, tests/ and lib/ (every library the programs
# load except glibc, libstdc++, libgcc and the CUDA libraries, which the GPU
# machine's own are used for), plus lib/openmpi3/ and lib/pmix/ (Open MPI's
# plug-ins, so that an MPI test can start as a singleton without mpirun).
# scripts/gpu_check.sh runs it.
set -euo pipefail

build=${1:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.xz}
out=${2:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.xz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/lib"

programs=(bin/trident bin/train_bench tests/cuda_device_test tests/cuda_consistency_test tests/cuda_training_test
          tests/nccl_communicator_test)
for p in "${programs[@]}"; do
  [[ -x $build/$p ]] || { echo "gpu_bundle: $build/$p is not built" >&2; exit 1; }
  strip --strip-unneeded -o "$stage/$p" "$build/$p"
done

ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
[[ -d $ompi_plugins ]] && cp -a "$ompi_plugins" "$stage/lib/openmpi3"
[[ -d $pmix_plugins ]] && cp -a "$pmix_plugins" "$stage/lib/pmix"

# Libraries that every Linux with a CUDA driver has, or that must come from the
# GPU machine itself (its CUDA runtime, cuBLAS and NCCL match its driver).
keep_out='^(linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|librt|libdl|libcuda|libcudart|libcublas|libnccl|libcudnn|libnvidia)'
mapfile -t objects < <(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \))
ldd "${objects[@]}" 2>/dev/null | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  [[ $name =~ $keep_out ]] && continue
  cp -L "$path" "$stage/lib/$name"
done
# The Open MPI plug-ins' own libraries (libpmix and the like) were picked up by
# the ldd above; Open MPI also reads its help texts and default parameters.
[[ -d /usr/share/openmpi ]] && cp -a /usr/share/openmpi "$stage/share-openmpi"
[[ -d /usr/share/pmix ]] && cp -a /usr/share/pmix "$stage/share-pmix"

tar -C "$stage" -cf - . | xz -T0 -9 > "$out.tmp"
mv "$out.tmp" "$out"
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1))"
