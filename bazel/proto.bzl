"""Turns .proto files into C++ protobuf + gRPC libraries with Debian's protoc.

Bazel's native cc_proto_library needs @com_google_protobuf, which would be
downloaded; this macro runs /usr/bin/protoc and /usr/bin/grpc_cpp_plugin in a
genrule instead and wraps the generated files in a cc_library.
"""

def cc_proto(name, srcs, deps = [], grpc = False, visibility = None):
    """C++ library `name` generated from `srcs` (files in this package).

    Args:
      name: the cc_library's name.
      srcs: .proto files of this package.
      deps: other cc_proto targets whose .proto files these import.
      grpc: also generate gRPC service stubs.
      visibility: passed on.
    """
    pkg = native.package_name()
    outs = []
    hdrs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.cc", base + ".pb.h"]
        hdrs.append(base + ".pb.h")
        if grpc:
            outs += [base + ".grpc.pb.cc", base + ".grpc.pb.h"]
            hdrs.append(base + ".grpc.pb.h")

    dep_srcs = [d + "_proto_srcs" for d in deps]
    cmd = ("/usr/bin/protoc -I. -I$(GENDIR) --cpp_out=$(GENDIR) " +
           ("--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " if grpc else "") +
           " ".join(["%s/%s" % (pkg, s) if pkg else s for s in srcs]))

    native.filegroup(
        name = name + "_proto_srcs",
        srcs = srcs + dep_srcs,
        visibility = visibility,
    )
    native.genrule(
        name = name + "_gen",
        srcs = srcs + dep_srcs,
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = hdrs,
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
