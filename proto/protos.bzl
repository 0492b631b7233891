"""The .proto files of weft.v1, named once for every generator: C++ (proto/BUILD) and Python
(python/BUILD)."""

# Relative to proto/, which is also the import root (`import "weft/v1/job.proto"`).
WEFT_PROTOS = [
    "weft/v1/job.proto",
    "weft/v1/program.proto",
    "weft/v1/profile.proto",
    "weft/v1/service.proto",
]

# Those that define gRPC services.
WEFT_GRPC_PROTOS = ["weft/v1/service.proto"]
