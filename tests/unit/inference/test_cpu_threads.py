from threadpoolctl import threadpool_info, threadpool_limits

from rolloutfleet.inference.cpu_threads import limit_cpu_threads


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_the_limit_reaches_numpys_blas_and_none_leaves_it() -> None:
    with threadpool_limits(limits=None):  # whatever this test sets is undone on exit
        assert blas_threads(), "numpy's BLAS is loaded and visible"
        limit_cpu_threads(1)
        assert set(blas_threads()) == {1}
        limit_cpu_threads(None)
        assert set(blas_threads()) == {1}
