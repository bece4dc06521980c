"""The packager's error hierarchy. Every message says what is wrong and what to do."""


class PackagerError(Exception):
    """Base of every error the packager raises on bad input or a failed step."""


class ProfileError(PackagerError):
    """A device profile is unknown or malformed."""


class ModelError(PackagerError):
    """The source model is not a valid ONNX model or cannot be used."""


class ConversionError(PackagerError):
    """A backend could not convert the model."""


class ParityError(PackagerError):
    """A converted artifact disagrees with the source model past the profile's tolerance."""


class BundleError(PackagerError):
    """A bundle is corrupt, truncated, unsafe or does not match its manifest."""


class SignatureError(BundleError):
    """A bundle's signature is missing, invalid, or made by an untrusted key."""


class UnsignedBundleError(SignatureError):
    """The bundle has no signature and unsigned bundles are not allowed."""


class NoTrustedKeyError(SignatureError):
    """The bundle is signed but no trusted public key was given to check it."""


class UntrustedSignatureError(SignatureError):
    """The signature is not a valid one by any trusted key (modified, or another signer)."""


class KeyFileError(PackagerError):
    """A key file is missing or is not an Ed25519 key."""


class UsageError(PackagerError):
    """An argument is invalid (a model name, a version number, an option value)."""


class UnsignedCodeError(SignatureError):
    """A bundle that carries code (a Python model) without a signature from a trusted key:
    refused whatever ``allow_unsigned`` says."""


class RegistryError(PackagerError):
    """An OCI registry could not be reached, refused us, or sent something we refuse."""


class RegistryUnavailableError(RegistryError):
    """The registry did not answer (after retries) or answered with a server error."""


class RegistryAuthError(RegistryError):
    """The registry wants credentials we do not have, or refused the ones we sent."""


class ArtifactNotFoundError(RegistryError):
    """No such repository, tag, digest or profile in the registry."""


class ArtifactRejectedError(RegistryError):
    """What the registry sent is not a bundle artifact we accept: a digest that does not
    match, a size past the limits, an unknown media type, malformed JSON."""
