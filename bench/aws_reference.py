"""The data plane of AWS's published heterogeneous-cluster sample, for comparison with hetgen's:
a Python gRPC server on the data instance whose DataLoader (the user's Dataset, `num_workers`
processes) fills a queue of 32 batches, streamed to the one trainer as raw bytes, one batch per
message; the trainer turns the bytes back into tensors.

The sample's shape, kept as its users run it, tuned where it costs nothing: messages carry the
batch's bytes after a small header with no protobuf encoding (grpcio's generic handlers with
identity serializers, cheaper than the sample's protobuf message), message limits raised so a
batch fits, and the server's DataLoader uses persistent workers.

    python bench/aws_reference.py PORT FOLDER WORKERS     # the data instance's server

`batches(port)` is the trainer's side (bench/data_host.py measures it).
"""

import queue
import struct
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

METHOD = "/reference.DataFeed/Stream"
LIMIT = 256 << 20
OPTIONS = [("grpc.max_send_message_length", LIMIT), ("grpc.max_receive_message_length", LIMIT)]
HEADER = struct.Struct("<4I")  # samples, channels, height, width


def serve(port, folder, workers):
    import torch
    from folder_dataset import Folder

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        Folder(folder), batch_size=32, shuffle=True, num_workers=workers, persistent_workers=True
    )
    batches = queue.Queue(maxsize=32)

    def fill():
        while True:
            for images, labels in loader:
                n, c, h, w = images.shape
                batches.put(
                    HEADER.pack(n, c, h, w)
                    + images.numpy().tobytes()
                    + labels.numpy().astype(np.int64).tobytes()
                )

    threading.Thread(target=fill, daemon=True).start()

    def stream(request, context):
        while context.is_active():
            yield batches.get()

    handler = grpc.method_handlers_generic_handler(
        "reference.DataFeed",
        {
            "Stream": grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=None, response_serializer=None
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    server.add_generic_rpc_handlers([handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


def batches(port):
    """The trainer's side: tensors from the stream, as the sample's client makes them."""
    import torch

    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=120)
    call = channel.unary_stream(METHOD, request_serializer=None, response_deserializer=None)
    for message in call(b""):
        n, c, h, w = HEADER.unpack_from(message)
        pixels = n * c * h * w
        images = np.frombuffer(message, np.uint8, pixels, HEADER.size).reshape(n, c, h, w)
        labels = np.frombuffer(message, np.int64, n, HEADER.size + pixels)
        yield torch.from_numpy(images), torch.from_numpy(labels)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
