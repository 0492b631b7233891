"""Where CUDA lives on the build machine, and the GPU architectures Weft compiles for.

Loaded by WORKSPACE (the @local_cuda repository), third_party/system/BUILD (the link flags) and
tools/cuda.bzl (nvcc). CUDA 13 from NVIDIA's packages installs here; change it in this one place.
"""

CUDA_ROOT = "/usr/local/cuda"

# sm_80 (A100) and sm_90 (H100/H200) machine code, plus compute_90 PTX so newer GPUs can JIT it.
CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]
