"""The packager's error hierarchy. Every message says what is wrong and what to do; every
class carries a machine-readable :class:`ErrorCode` (``edge-pack`` prints it with the message)."""

from __future__ import annotations

from enum import Enum


class ErrorCode(Enum):
    """What went wrong, one code per error class, stable for scripts (``edge-pack`` prints it
    in brackets after the message and in its ``--json`` error object)."""

    ERROR = "ERROR"
    PROFILE = "PROFILE"
    MODEL = "MODEL"
    CONVERSION = "CONVERSION"
    PARITY = "PARITY"
    BUNDLE = "BUNDLE"
    SIGNATURE = "SIGNATURE"
    UNSIGNED = "UNSIGNED"
    NO_TRUSTED_KEY = "NO_TRUSTED_KEY"
    UNTRUSTED_SIGNATURE = "UNTRUSTED_SIGNATURE"
    KEY_FILE = "KEY_FILE"
    USAGE = "USAGE"
    UNSIGNED_CODE = "UNSIGNED_CODE"
    REGISTRY = "REGISTRY"
    REGISTRY_UNAVAILABLE = "REGISTRY_UNAVAILABLE"
    TRANSFER_STOPPED = "TRANSFER_STOPPED"
    REGISTRY_AUTH = "REGISTRY_AUTH"
    ARTIFACT_NOT_FOUND = "ARTIFACT_NOT_FOUND"
    ARTIFACT_REJECTED = "ARTIFACT_REJECTED"
    REFERENCE = "REFERENCE"
    REGISTRY_NOT_ALLOWED = "REGISTRY_NOT_ALLOWED"
    TENSORRT_UNAVAILABLE = "TENSORRT_UNAVAILABLE"


class PackagerError(Exception):
    """Base of every error the packager raises on bad input or a failed step."""

    code: ErrorCode = ErrorCode.ERROR


class ProfileError(PackagerError):
    """A device profile is unknown or malformed."""

    code = ErrorCode.PROFILE


class ModelError(PackagerError):
    """The source model is not a valid ONNX model or cannot be used."""

    code = ErrorCode.MODEL


class ConversionError(PackagerError):
    """A backend could not convert the model."""

    code = ErrorCode.CONVERSION


class ParityError(PackagerError):
    """A converted artifact disagrees with the source model past the profile's tolerance."""

    code = ErrorCode.PARITY


class BundleError(PackagerError):
    """A bundle is corrupt, truncated, unsafe or does not match its manifest."""

    code = ErrorCode.BUNDLE


class SignatureError(BundleError):
    """A bundle's signature is missing, invalid, or made by an untrusted key."""

    code = ErrorCode.SIGNATURE


class UnsignedBundleError(SignatureError):
    """The bundle has no signature and unsigned bundles are not allowed."""

    code = ErrorCode.UNSIGNED


class NoTrustedKeyError(SignatureError):
    """The bundle is signed but no trusted public key was given to check it."""

    code = ErrorCode.NO_TRUSTED_KEY


class UntrustedSignatureError(SignatureError):
    """The signature is not a valid one by any trusted key (modified, or another signer)."""

    code = ErrorCode.UNTRUSTED_SIGNATURE


class KeyFileError(PackagerError):
    """A key file is missing or is not an Ed25519 key."""

    code = ErrorCode.KEY_FILE


class UsageError(PackagerError):
    """An argument is invalid (a model name, a version number, an option value)."""

    code = ErrorCode.USAGE


class UnsignedCodeError(SignatureError):
    """A bundle that carries code (a Python model) without a signature from a trusted key:
    refused whatever ``allow_unsigned`` says."""

    code = ErrorCode.UNSIGNED_CODE


class RegistryError(PackagerError):
    """An OCI registry could not be reached, refused us, or sent something we refuse."""

    code = ErrorCode.REGISTRY


class RegistryUnavailableError(RegistryError):
    """The registry did not answer (after retries) or answered with a server error."""

    code = ErrorCode.REGISTRY_UNAVAILABLE


class TransferStoppedError(RegistryError):
    """A transfer was ended from our side before it finished (an agent shutting down)."""

    code = ErrorCode.TRANSFER_STOPPED


class RegistryAuthError(RegistryError):
    """The registry wants credentials we do not have, or refused the ones we sent."""

    code = ErrorCode.REGISTRY_AUTH


class ArtifactNotFoundError(RegistryError):
    """No such repository, tag, digest or profile in the registry."""

    code = ErrorCode.ARTIFACT_NOT_FOUND


class ArtifactRejectedError(RegistryError):
    """What the registry sent is not a bundle artifact we accept: a digest that does not
    match, a size past the limits, an unknown media type, malformed JSON."""

    code = ErrorCode.ARTIFACT_REJECTED
