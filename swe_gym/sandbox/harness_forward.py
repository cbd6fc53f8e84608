"""Inside a sandbox: ``127.0.0.1:PORT`` forwarded to the episode's unix socket.

The sandbox has no network, only ``lo``; the trainer binds a socket into it
(``swe_gym.sandbox.harness``) and this script, run with the sandbox's own interpreter, gives
the harness an ordinary TCP endpoint for its ``OPENAI_BASE_URL``. Bytes pass unchanged: the
host side of the socket is what decides what a request may do.

Usage: ``python forward.py SOCKET PORT_FILE``; the port it listens on (chosen by the kernel)
is written to ``PORT_FILE`` once it listens. Standard library and Python 3.5 syntax only: it
runs on whatever interpreter the task's environment has.
"""

import os
import socket
import sys
import threading


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)  # pass the end of one direction on, keep the other open
    except OSError:
        pass


def _serve(conn, path):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        up.close()
        return
    back = threading.Thread(target=_pipe, args=(up, conn))
    back.daemon = True
    back.start()
    _pipe(conn, up)
    back.join()
    conn.close()
    up.close()


def main():
    path, port_file = sys.argv[1], sys.argv[2]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)  # whole or absent for the launcher that waits on it
    while True:
        conn, _ = server.accept()
        worker = threading.Thread(target=_serve, args=(conn, path))
        worker.daemon = True
        worker.start()


if __name__ == "__main__":
    main()
