"""The service's real-process tests."""

# Tags of a test that reads inputs Bazel does not track (data/ from
# tools/get_data.sh, Debian packages, node modules, the system's Python):
# never served from a cache, always run.
UNDECLARED_INPUTS = ["external", "no-cache"]

# The binaries a process test is called with, in this order.
_SERVICE = [
    "//tools:bert_local",
    "//server/coordinator:bertps_coordinator",
    "//server/ps:bertps_server",
    "//worker:bertps_worker",
    "//tools:bertpsctl",
]

def service_test(name, size = "medium", extra_args = [], data = [],
                 tags = UNDECLARED_INPUTS):
    """sh_test of NAME.sh, called with the paths of bert_local, the
    coordinator, the shard server, the worker and bertpsctl, then of each
    label in extra_args; `data` are further files it reads."""
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".sh"],
        args = ["$(location %s)" % t for t in _SERVICE + extra_args],
        data = _SERVICE + extra_args + data,
        tags = tags,
    )
