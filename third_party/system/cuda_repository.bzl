"""The @local_cuda repository: CUDA's headers at CUDA_ROOT, or an empty stand-in without CUDA.

Bazel resolves the dependencies of every target that `bazel build //...` matches, even those
skipped as incompatible, so the repository must exist on machines without CUDA too. There it
holds an empty `headers` library, and only the `--config=cuda` build (which needs the headers)
fails, naming CUDA_ROOT.
"""

def _local_cuda_impl(ctx):
    include = ctx.path(ctx.attr.path + "/include")
    if include.exists:
        ctx.symlink(include, "include")
        ctx.symlink(ctx.attr.build_file, "BUILD.bazel")
        return
    ctx.file("BUILD.bazel", "\n".join([
        "# No CUDA at %s: an empty stand-in, so the default build works without CUDA." % ctx.attr.path,
        'package(default_visibility = ["//visibility:public"])',
        'cc_library(name = "headers")',
        "",
    ]))

local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    attrs = {
        "path": attr.string(mandatory = True),
        "build_file": attr.label(allow_single_file = True, mandatory = True),
    },
    local = True,
)
