"""A quick check that tensorflow-datasets can download, before it starts to.

Offline, `tfds.load(..., download=True)` retries for minutes (212 s seen) before it
fails, and leaves partial folders in its data directory. Probing the download host
first (one TCP connection, a few seconds at most) turns that into an immediate error
naming the local alternative, with nothing written.
"""

import logging
import socket

# tensorflow-datasets downloads prepared data and checksums from Google Cloud Storage.
DOWNLOAD_HOST = ("storage.googleapis.com", 443)

logger = logging.getLogger(__name__)


def require_network(what, alternative, timeout=3.0):
    """Raises `ConnectionError` at once when the download host cannot be reached.

    Args:
        what: str. What would be downloaded (named in the message).
        alternative: str. The local way to run without a download.
        timeout: float. Seconds to wait for the connection. Defaults to 3.
    """
    try:
        socket.create_connection(DOWNLOAD_HOST, timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(
            f"{what} is not prepared locally and {DOWNLOAD_HOST[0]} cannot be reached to "
            f"download it ({type(error).__name__}: {error}); nothing was downloaded. "
            f"{alternative}"
        ) from None


def load_tfds(name, split, what, alternative, unavailable, **kwargs):
    """`tfds.load(name, split=split, **kwargs)`: prepared, else downloaded if the host answers.

    Args:
        what, alternative: str. For `require_network`'s message, offline.
        unavailable: str. The `RuntimeError`'s message when the download fails too (its
            cause is appended).

    Raises:
        ValueError: tensorflow-datasets has no dataset `name`.
        ConnectionError: not prepared, and the download host does not answer.
        RuntimeError: not prepared, and the download failed.
    """
    import tensorflow_datasets as tfds

    try:  # Already prepared (or mocked by `tfds.testing.mock_data`): no network.
        return tfds.load(name, split=split, download=False, **kwargs)
    except Exception as error:  # noqa: BLE001 - tfds raises many kinds when data is missing
        if isinstance(error, tfds.core.registered.DatasetNotFoundError):
            raise ValueError(f"No tensorflow-datasets dataset named {name!r} "
                             f"(`tfds.list_builders()` lists them). {alternative}") from error
        require_network(what, alternative)
        logger.warning("tfds dataset %r is not prepared; downloading it.", name)
    try:
        return tfds.load(name, split=split, download=True, **kwargs)
    except Exception as error:  # noqa: BLE001
        raise RuntimeError(f"{unavailable} Cause: {type(error).__name__}: {error}") from error
