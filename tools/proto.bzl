"""weft_proto_library: C++ (and gRPC) code from .proto files with Debian's protoc and
grpc_cpp_plugin, run in a genrule so nothing is downloaded."""

def weft_proto_library(name, srcs, proto_root, deps = [], grpc_srcs = [], visibility = None):
    """Generates and compiles <x>.pb.{h,cc} for every src and <x>.grpc.pb.{h,cc} for grpc_srcs.

    Sources are named relative to the package; imports are resolved against proto_root (a folder
    inside the package), so `import "weft/v1/job.proto"` works with proto_root = ".".
    """
    outs_h = []
    outs_cc = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs_h.append(base + ".pb.h")
        outs_cc.append(base + ".pb.cc")
    for src in grpc_srcs:
        base = src[:-len(".proto")]
        outs_h.append(base + ".grpc.pb.h")
        outs_cc.append(base + ".grpc.pb.cc")
    pkg = native.package_name()
    out_root = "$(GENDIR)/" + pkg + ("/" + proto_root if proto_root != "." else "")
    src_root = pkg + ("/" + proto_root if proto_root != "." else "")
    cmd = "protoc --proto_path=" + src_root + " --cpp_out=" + out_root
    if grpc_srcs:
        cmd += " --grpc_out=" + out_root + " --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)"
    cmd += " $(SRCS)"
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = outs_h + outs_cc,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = outs_cc,
        hdrs = outs_h,
        includes = [proto_root],
        deps = deps + ["//third_party/system:protobuf"] + (["//third_party/system:grpc"] if grpc_srcs else []),
        visibility = visibility,
    )
