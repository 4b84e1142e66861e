"""bertps_fuzz_target: a libFuzzer target (docs/fuzzing.md).

With --config=fuzz (//fuzz:fuzzing) the binary links libFuzzer's main
(-fsanitize=fuzzer) and the structured mutator (BERTPS_FUZZING); otherwise
it links replay_main.cc, which runs the target once on each file given.
"""

def bertps_fuzz_target(name, srcs, deps = []):
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = select({
            "//fuzz:fuzzing": ["-DBERTPS_FUZZING"],
            "//conditions:default": [],
        }),
        linkopts = select({
            "//fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + ["//fuzz:fuzz_input"] + select({
            "//fuzz:fuzzing": [],
            "//conditions:default": ["//fuzz:replay_main"],
        }),
    )
