"""Offline shim: forwards rules_proto's public rules to Bazel 4's native ones."""

def proto_library(**kwargs):
    native.proto_library(**kwargs)

def proto_lang_toolchain(**kwargs):
    native.proto_lang_toolchain(**kwargs)
