"""hidden/safe.py's `device`: the arrays the hidden checks and the referee hand to an answer are in buffers XLA
owns, whatever their rank, so that a correct answer's donation is usable; a NumPy array that happens to be
64-byte aligned is aliased by jax.device_put instead, and its donation is not (the other side, shown here on the
pinned jax)."""
import jax
import numpy as np
import pytest

from donation_course.hidden.safe import device

SHAPES = [(), (5,), (3, 4), (2, 3, 4)]


def aligned(values):
    """A copy of `values` in a host buffer that starts on a 64-byte boundary."""
    raw = np.empty(values.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64
    host = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    host[...] = values
    return host


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_device_gives_a_buffer_a_donating_program_reuses(shape):
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x = device(values)
    assert x.shape == shape and np.array_equal(np.asarray(x), values)
    before = x.unsafe_buffer_pointer()
    out = jax.jit(lambda a: a + 1, donate_argnums=0)(x)
    assert x.is_deleted() and out.unsafe_buffer_pointer() == before  # the donation was used
    assert np.array_equal(np.asarray(out), values + 1)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_device_put_of_an_aligned_array_aliases_it_and_its_donation_is_not_used(shape):
    host = aligned(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    x = jax.device_put(host)
    assert x.unsafe_buffer_pointer() == host.ctypes.data  # XLA reads NumPy's buffer in place
    before = x.unsafe_buffer_pointer()
    out = jax.jit(lambda a: a + 2, donate_argnums=0)(x)  # (no warning: the program could donate; this buffer not)
    assert out.unsafe_buffer_pointer() != before
