#!/usr/bin/env bash
# Device driver for session 22 (#31). Usage: bash dev31.sh <phase> ; phases: build, tests, fixtures, ex:<programs>, cpu:<programs>
set -uo pipefail
R=$(pwd)
export NCCL_NVLS_ENABLE=0
export PATH=/usr/local/cuda/bin:$PATH
export CGRAD_FASHION_MNIST_DIR=$R/.deps/prefix/usr/share/datasets/fashion-mnist
export LD_LIBRARY_PATH=$R/.deps/prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p $OUT/logs
for phase in "$@"; do
  case $phase in
    build)
      t0=$SECONDS; BUILD_DIR=build scripts/setup.sh > $OUT/logs/build.log 2>&1 || { tail -40 $OUT/logs/build.log; exit 1; }
      echo "build: $((SECONDS - t0)) s";;
    tests)
      t0=$SECONDS; (cd build && ctest -j 16 --output-on-failure > $OUT/logs/ctest.log 2>&1)
      grep -E "tests passed|tests failed" $OUT/logs/ctest.log; grep -E "\*\*\*Failed|Timeout|\(Failed\)" $OUT/logs/ctest.log | head -20
      grep -c "Skipped" $OUT/logs/ctest.log; grep "(Skipped)" $OUT/logs/ctest.log | head
      echo "tests: $((SECONDS - t0)) s";;
    fixtures)
      mkdir -p $OUT/fixtures
      for f in tests/make_dcgan_fixtures.py tests/make_resnet_fixtures.py; do python3 $f > $OUT/logs/$(basename $f).log 2>&1 || tail -5 $OUT/logs/$(basename $f).log; done
      git status --short tests/data | awk '{print $2}' | xargs -r tar czf $OUT/fixtures/data.tgz; git status --short tests/data;;
    ex:*)
      progs=${phase#ex:}; t0=$SECONDS
      python3 bench/run_examples.py --build build --device cuda --only $progs --log $OUT/logs/ex_${progs//,/_}.log 2>&1 | tail -30
      echo "examples $progs: $((SECONDS - t0)) s";;
    cpu:*)
      progs=${phase#cpu:}; t0=$SECONDS
      python3 bench/run_examples.py --build build --device cpu --threads 16 --seeds 1,2,3 --only $progs --log $OUT/logs/cpu_${progs//,/_}.log 2>&1 | tail -20
      echo "cpu $progs: $((SECONDS - t0)) s";;
  esac
done
