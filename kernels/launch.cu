// The launchers' view of the GPU (kernels.h): its multiprocessor count, queried once per device.
#include "kernels.h"

#define CG_LAUNCH_MAX_DEVICES 64

extern "C" int cg_launch_sm_count(void) {
    static int sm_counts[CG_LAUNCH_MAX_DEVICES]; // 0: not asked yet; written the same by any thread
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= CG_LAUNCH_MAX_DEVICES) return 1;
    int n = __atomic_load_n(&sm_counts[device], __ATOMIC_RELAXED);
    if (n > 0) return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n < 1) n = 1;
    __atomic_store_n(&sm_counts[device], n, __ATOMIC_RELAXED);
    return n;
}
