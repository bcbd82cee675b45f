"""The suite's XLA settings hold on every XLA that pip installs: one without a flag the suite sets
would abort every test process at start (jaxlib 0.12 has no ``--xla_cpu_use_fusion_emitters``)."""

from tests.xla_env import OPTIMIZATION_LEVEL_0, fast_compile_flags, xla_knows


def test_an_unknown_flag_is_found_out_in_a_child_process():
    assert xla_knows(OPTIMIZATION_LEVEL_0)
    assert not xla_knows("--xla_cpu_no_such_flag=true")


def test_the_suite_sets_only_flags_this_xla_knows():
    flags = fast_compile_flags().split()
    assert OPTIMIZATION_LEVEL_0 in flags and xla_knows(" ".join(flags))
