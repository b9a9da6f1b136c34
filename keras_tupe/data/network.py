"""A quick check that tensorflow-datasets can download, before it starts to.

Offline, `tfds.load(..., download=True)` retries for minutes (212 s seen) before it
fails, and leaves partial folders in its data directory. Probing the download host
first (one TCP connection, a few seconds at most) turns that into an immediate error
naming the local alternative, with nothing written.
"""

import socket

# tensorflow-datasets downloads prepared data and checksums from Google Cloud Storage.
DOWNLOAD_HOST = ("storage.googleapis.com", 443)


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
