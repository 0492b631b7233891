"""CUDA in Bazel without rules_cuda: nvcc in a genrule per .cu file, wrapped in a cc_library.

Everything declared with these macros builds only under `--config=cuda`; in the default build it
is incompatible and skipped by `bazel build //...` and `bazel test //...`, so a machine without
CUDA builds the rest.

E.g.
    cuda_library(
        name = "ops",
        srcs = ["ops.cu"],
        hdrs = ["ops.h"],
    )
    cc_library(name = "cuda", srcs = ["cuda_kernels.cc"], deps = [":ops"], **CUDA_ONLY_KWARGS)
"""

load("//third_party/system:cuda.bzl", "CUDA_GENCODE", "CUDA_ROOT")

# target_compatible_with for targets that exist only in a CUDA build.
CUDA_ONLY = select({
    "//tools:cuda": [],
    "//conditions:default": ["@platforms//:incompatible"],
})

def if_cuda(if_true, if_false = []):
    """if_true under --config=cuda, if_false otherwise."""
    return select({
        "//tools:cuda": if_true,
        "//conditions:default": if_false,
    })

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library of .cu files compiled by nvcc (position-independent, -O3, C++17).

    hdrs are the headers the .cu files include from this workspace; they are also the library's
    public headers. deps are cc deps of the public headers (the CUDA headers come with it).
    """
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".pic.o")
        native.genrule(
            name = obj.replace(".", "_"),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                CUDA_ROOT + "/bin/nvcc",
                "-c -O3 -std=c++17 --expt-relaxed-constexpr",
                "-Xcompiler=-fPIC,-Wall",
                " ".join(CUDA_GENCODE),
                " ".join(copts),
                "-I. -I$(GENDIR)",
                "-o $@ $(location " + src + ")",
            ]),
            target_compatible_with = CUDA_ONLY,
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party/system:cudart"],
        target_compatible_with = CUDA_ONLY,
        **kwargs
    )
