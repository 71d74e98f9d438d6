"""A TCP forwarder standing in for a Service in front of several workers: each new connection
goes to the backend chosen now, as kube-proxy picks an endpoint per connection; :meth:`switch`
cuts the open connections (a dropped connection, a restarted proxy) and sends new ones to
another backend."""

from __future__ import annotations

import contextlib
import socket
import threading


class Switchboard:
    def __init__(self, backend: int) -> None:
        self.backend = backend
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections: list[int] = []
        """The backend of every connection made, in order."""
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def switch(self, backend: int, cut_open: bool = True) -> None:
        """New connections go to ``backend``; the open ones are cut (else they stay, as
        kube-proxy keeps a connection to an endpoint that left the Service)."""
        with self._lock:
            self.backend = backend
            cut, self._open = (self._open, []) if cut_open else ([], self._open)
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.switch(self.backend)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                backend = self.backend
                self.connections.append(backend)
            server = socket.create_connection(("127.0.0.1", backend))
            with self._lock:
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
