"""A TCP proxy in front of the embedded Postgres that loses the answer to a COMMIT: the connection drops after
Postgres committed, so the client cannot know that it did (a Cloud SQL failover, a reset link). Armed with a
marker (bytes of a statement's text, sent when a connection first prepares it), it lets the next COMMIT of each
connection that sent the marker through, waits for Postgres to answer it (committed), and closes both sockets
instead of passing the answer on: the driver then raises a network error, as it does on Cloud SQL."""

from __future__ import annotations

import socket
import struct
import threading

from zen.store.connect import ConnectionTarget


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _message(sock: socket.socket, typed: bool = True) -> bytes:
    """One protocol message, whole (its type byte, its length, its body); the startup message has no type."""
    head = _read(sock, 5 if typed else 4)
    (length,) = struct.unpack("!i", head[-4:])
    return head + _read(sock, length - 4)


class CommitLostProxy:
    def __init__(self, upstream: ConnectionTarget):
        self._upstream = upstream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.marker: bytes | None = None
        self.lost = 0  # COMMITs whose answer was dropped
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def target(self) -> ConnectionTarget:
        return ConnectionTarget(self._upstream.user, self._upstream.database, self._upstream.password,
                                host="127.0.0.1", port=self._listener.getsockname()[1])

    def close(self) -> None:
        self._listener.close()

    def _connect_upstream(self) -> socket.socket:
        if self._upstream.unix_sock:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._upstream.unix_sock)
        else:
            server = socket.create_connection((self._upstream.host, self._upstream.port))
        return server

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = self._connect_upstream()
            state = {"marked": False, "dropping": False}
            threading.Thread(target=self._from_client, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._from_server, args=(client, server, state), daemon=True).start()

    def _from_client(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        try:
            startup = _message(client, typed=False)
            if startup == struct.pack("!ii", 8, 80877103):  # an SSLRequest (pg8000 asks over TCP): no SSL here
                client.sendall(b"N")
                startup = _message(client, typed=False)
            server.sendall(startup)
            while True:
                message = _message(client)
                if self.marker is not None and self.marker in message:
                    state["marked"] = True
                if state["marked"] and message[:1] == b"Q" and message[5:].rstrip(b"\0").strip() == b"COMMIT":
                    state["dropping"] = True  # before Postgres can answer it
                server.sendall(message)
        except OSError:
            pass

    def _from_server(self, client: socket.socket, server: socket.socket, state: dict) -> None:
        try:
            while True:
                message = _message(server)
                if not state["dropping"]:
                    client.sendall(message)
                elif message[:1] == b"Z":  # Postgres is done with the COMMIT: committed, and never told
                    self.lost += 1
                    break
        except OSError:
            pass
        for sock in (client, server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
