"""Inside the sandbox: relay a loopback port to the host's one destination, then run a program.

    python3 -c SOURCE FD -- PROGRAM ARGS...      ({forward_port} in ARGS becomes the port)

The relay listens on 127.0.0.1 in the sandbox's own network namespace. For
each connection it accepts, it asks the host, over the inherited socket FD,
for a socket already connected to the forward's destination (passed back with
SCM_RIGHTS), and pumps bytes both ways. The program can reach nothing else:
it never names an address outside, and it creates no Unix socket (the seccomp
filter still refuses them). The relay exits with the program's status.

Standard library only: it runs with the sandbox's Python, which sees none of
the project's packages.
"""

import contextlib
import socket
import subprocess
import sys
import threading


def pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def main() -> None:
    fd = int(sys.argv[1])
    if sys.argv[2] != "--" or len(sys.argv) < 4:
        sys.exit("usage: relay FD -- PROGRAM ARGS...")
    control = socket.socket(fileno=fd)
    asking = threading.Lock()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    def serve(client: socket.socket) -> None:
        with asking:
            control.sendall(b"c")
            _, fds, _, _ = socket.recv_fds(control, 1, 1)
        if not fds:  # the host could not connect: the client sees a closed connection
            client.close()
            return
        upstream = socket.socket(fileno=fds[0])
        upstream.setblocking(True)  # the flag lives on the shared file description
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join()
        client.close()
        upstream.close()

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    argv = [word.replace("{forward_port}", str(port)) for word in sys.argv[3:]]
    child = subprocess.run(argv, check=False)
    sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)


if __name__ == "__main__":
    main()
