"""The CRI v1 ``ImageService`` client: list, inspect, pull and remove images.

The image manager and image garbage collector reach the runtime's image store
only through these calls. The rules follow the Go kubelet's remote image
client: every call has the ``runtimeRequestTimeout`` deadline except
``PullImage``, which may legitimately take longer than any fixed limit and is
bounded only by its caller; an image the runtime does not have is ``None``,
not an error; answers missing required fields are rejected.
"""

from __future__ import annotations

from typing import Any

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from pykubelet.cri.errors import CRIError, RuntimeUnavailableError, UnsupportedAPIError
from pykubelet.cri.runtime import DEFAULT_REQUEST_TIMEOUT, GrpcConnection, check_socket
from pykubelet.util import klog


class ImagePullError(CRIError):
    """``PullImage`` failed; ``str()`` is the runtime's own message.

    The runtime's text ("failed to pull and unpack image ...") ends up in the
    pod's ``ErrImagePull`` event and status message, where a gRPC code prefix
    only adds noise (the Go kubelet strips it for UNKNOWN errors as well).
    """

    def _text(self) -> str:
        if self.code == grpc.StatusCode.UNKNOWN:
            return self.details
        return super()._text()


class RemoteImageService(GrpcConnection):
    """An asyncio client of the CRI v1 ``ImageService`` on a unix socket."""

    _log_prefix = "[RemoteImageService]"
    _service_noun = "image service"

    def __init__(self, endpoint: str, request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        super().__init__(endpoint, request_timeout)
        self._stub_instance: Any = None

    def _stub(self) -> Any:
        if self._stub_instance is None or self._channel is None:
            self._stub_instance = api_pb2_grpc.ImageServiceStub(self._open_channel())
        return self._stub_instance

    async def connect(self) -> None:
        """Check the socket, then make one CRI v1 image call (ImageFsInfo) to validate it."""
        klog.v(3).info("Connecting to image service", endpoint=self.endpoint)
        check_socket(self.endpoint)
        try:
            await self.image_fs_info()
        except RuntimeUnavailableError:
            raise
        except CRIError as err:
            if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RuntimeUnavailableError(
                    self.endpoint,
                    f"no answer to the CRI ImageFsInfo call within {self.request_timeout:g}s",
                    method="ImageFsInfo", code=err.code) from err
            if err.code == grpc.StatusCode.UNIMPLEMENTED:
                raise UnsupportedAPIError(self.endpoint, err.details,
                                          method="ImageFsInfo") from err
            raise
        klog.v(2).info("Validated CRI v1 image API")

    async def list_images(
            self, filter: api_pb2.ImageFilter | None = None) -> list[api_pb2.Image]:
        return await self._list("ListImages", api_pb2.ListImagesRequest(filter=filter), "images",
                                filter)

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.Image | None:
        """The runtime's record of ``image`` (a name or id), or None when it does not have it."""
        request = api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image),
                                             verbose=verbose)
        response: api_pb2.ImageStatusResponse = await self._call(
            "ImageStatus", request, timeout=self.request_timeout, names={"image": image},
            invalid=lambda r: (f"Id or size of image {image!r} is not set"
                               if r.HasField("image") and (not r.image.id or not r.image.size)
                               else None),
            answer=lambda r: {"present": r.HasField("image")})
        return response.image if response.HasField("image") else None

    async def pull_image(self, image: str, auth: api_pb2.AuthConfig | None = None,
                         sandbox_config: api_pb2.PodSandboxConfig | None = None) -> str:
        """Pull ``image`` and return the runtime's reference to it (usually ``sha256:...``).

        No deadline: big images take as long as they take; cancel the task to give up.
        """
        method = "PullImage"
        request = api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=image), auth=auth,
                                           sandbox_config=sandbox_config)

        def pull_failed(err: CRIError) -> CRIError:
            if isinstance(err, RuntimeUnavailableError):
                return err
            return ImagePullError(method, err.code, err.details)

        response: api_pb2.PullImageResponse = await self._call(
            method, request, timeout=None, names={"image": image}, call_log={"image": image},
            translate=pull_failed,
            invalid=lambda r: None if r.image_ref else f"imageRef of image {image!r} is not set",
            answer=lambda r: {"imageRef": r.image_ref})
        return response.image_ref

    async def remove_image(self, image: str) -> None:
        await self._call("RemoveImage",
                         api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=image)),
                         timeout=self.request_timeout, names={"image": image})

    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse:
        response: api_pb2.ImageFsInfoResponse = await self._call(
            "ImageFsInfo", api_pb2.ImageFsInfoRequest(), timeout=self.request_timeout,
            answer=lambda r: {"filesystems": len(r.image_filesystems)})
        return response


__all__ = ["ImagePullError", "RemoteImageService"]
