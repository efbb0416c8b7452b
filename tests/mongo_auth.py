"""A MongoDB server with a password: nx-27017 behind a proxy that performs SASL PLAIN authentication.

nx-27017 speaks MongoDB's wire protocol but has no users, and a driver given ``user:password@``
authenticates before anything else, so a URI with credentials cannot reach it. ``PlainAuthProxy``
sits in front of it: it answers ``saslStart`` with mechanism ``PLAIN`` itself (accepting only
the one user and password it was given, the check a server makes) and passes every other
message through unchanged. pymongo authenticates for real against it with
``authMechanism=PLAIN&authSource=$external``; every other mechanism is refused, as a server
without it would.
"""

from __future__ import annotations

import socket
import struct
import threading

import bson

OP_MSG = 2013
_HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode


def _receive(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _message(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """One wire-protocol message as (header, body), or None when the peer closed."""
    header = _receive(sock, _HEADER.size)
    if header is None:
        return None
    body = _receive(sock, _HEADER.unpack(header)[0] - _HEADER.size)
    return None if body is None else (header, body)


def _command(body: bytes) -> dict | None:
    """The command document of an OP_MSG body (its kind-0 section)."""
    offset = 4  # flagBits
    while offset < len(body):
        kind = body[offset]
        size = struct.unpack_from("<i", body, offset + 1)[0]
        if kind == 0:
            return bson.decode(body[offset + 1 : offset + 1 + size])
        offset += 1 + size
    return None


class PlainAuthProxy:
    """127.0.0.1:``port`` in front of ``upstream`` (host, port), for one ``user`` with ``password``.

    ``logins`` lists every (user, password) a client presented, accepted or not.
    """

    def __init__(self, upstream: tuple[str, int], user: str, password: str) -> None:
        self.upstream, self.user, self.password = upstream, user, password
        self.logins: list[tuple[str, str]] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._ids = iter(range(1, 1 << 30))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        lock = threading.Lock()
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pump, args=(upstream, client, lock), daemon=True).start()
        try:
            while (message := _message(client)) is not None:
                header, body = message
                reply = self._authenticate(header, body)
                if reply is None:
                    upstream.sendall(header + body)
                else:
                    with lock:
                        client.sendall(reply)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket, lock: threading.Lock) -> None:
        try:
            while (message := _message(source)) is not None:
                with lock:
                    target.sendall(b"".join(message))
        except OSError:
            pass
        finally:
            target.close()

    def _authenticate(self, header: bytes, body: bytes) -> bytes | None:
        """The reply to a SASL command, or None for anything else (passed to the server)."""
        _, request_id, _, opcode = _HEADER.unpack(header)
        command = _command(body) if opcode == OP_MSG else None
        if not command or next(iter(command)) not in ("saslStart", "saslContinue"):
            return None
        if command.get("mechanism") != "PLAIN":
            reply = {"ok": 0.0, "errmsg": "Authentication failed.", "code": 18, "codeName": "AuthenticationFailed"}
        else:
            _authzid, user, password = bytes(command["payload"]).decode().split("\0")
            self.logins.append((user, password))
            if (user, password) == (self.user, self.password):
                reply = {"conversationId": 1, "done": True, "payload": b"", "ok": 1.0}
            else:
                reply = {"ok": 0.0, "errmsg": "Authentication failed.", "code": 18, "codeName": "AuthenticationFailed"}
        section = struct.pack("<I", 0) + b"\x00" + bson.encode(reply)
        return _HEADER.pack(_HEADER.size + len(section), next(self._ids), request_id, OP_MSG) + section
