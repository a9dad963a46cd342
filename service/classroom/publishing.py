"""Passages of a classroom: added within the token budget, published (one of them active for the pupils),
edited as new versions and deleted; the questions asked about one keep it."""

from collections.abc import Awaitable, Callable

import anyio.to_thread

from service.backends.warmup import Warmup
from service.classroom.document_worker import DocumentReader
from service.classroom.prompting import Prompts
from service.errors import FarTooLong, FileTooLarge, PassageNotFound
from service.records import Passage
from service.store import Store
from service.store.ids import new_id


class Passages:
    def __init__(
        self, store: Store, prompts: Prompts, warmup: Warmup | None, reader: DocumentReader, *, upload_max_bytes: int
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._warmup = warmup
        self._reader = reader
        self._upload_max_bytes = upload_max_bytes

    async def add(self, classroom_id: str, title: str, text: str, *, publish: bool) -> Passage:
        """Store a passage that fits the budget; `publish`: make it the one pupils ask about, at once."""
        title, text = title.strip(), text.strip()
        tokens = await self._checked(title, text)
        passage = Passage(id=new_id(), classroom_id=classroom_id, title=title, text=text, tokens=tokens)
        await self._store.add_passage(passage, publish=publish)
        if publish:
            self._activated(passage)
        return passage

    async def add_upload(
        self, classroom_id: str, filename: str, read: Callable[[int], Awaitable[bytes]], title: str, *, publish: bool
    ) -> Passage:
        """`add_document` of an uploaded file, read with `read(most)`: no more of it than the upload limit and
        one byte, so a file too large is refused without being held whole."""
        data = await read(self._upload_max_bytes + 1)
        if len(data) > self._upload_max_bytes:
            raise FileTooLarge(self._upload_max_bytes)
        return await self.add_document(classroom_id, filename, data, title, publish=publish)

    async def add_document(
        self, classroom_id: str, filename: str, data: bytes, title: str, *, publish: bool
    ) -> Passage:
        """A passage from an uploaded file (read apart from the service, `DocumentReader`). Its title: `title`,
        else the document's own, else the file's name without its extension."""
        document = await self._reader.read(filename, data)
        if document.cut:
            raise FarTooLong(self._prompts.passage_max_tokens)
        name = title.strip() or document.title or filename.rsplit(".", 1)[0]
        return await self.add(classroom_id, name, document.text, publish=publish)

    async def edit(self, classroom_id: str, passage_id: str, title: str, text: str) -> tuple[Passage, bool]:
        """A new version of a passage of the class's list, in its place (the old one stays stored for its
        questions); the one pupils see if the old one was. Returns it, and whether pupils see it."""
        old = await self._get(classroom_id, passage_id)
        title, text = title.strip(), text.strip()
        tokens = await self._checked(title, text)
        new = Passage(
            id=new_id(),
            classroom_id=classroom_id,
            title=title,
            text=text,
            tokens=tokens,
            version=old.version + 1,
            previous_id=old.id,
        )
        published = await self._store.replace_passage(old, new)
        if published:
            self._activated(new)
        return new, published

    async def delete(self, classroom_id: str, passage_id: str) -> None:
        """Out of the class's list (not the one pupils see); stored still for the questions asked about it."""
        await self._get(classroom_id, passage_id)
        await self._store.remove_passage(classroom_id, passage_id)

    async def choose_active(self, classroom_id: str, passage_id: str) -> Passage:
        passage = await self._get(classroom_id, passage_id)
        await self._store.set_active_passage(classroom_id, passage_id)
        self._activated(passage)
        return passage

    async def _get(self, classroom_id: str, passage_id: str) -> Passage:
        passage = await self._store.get_passage(passage_id)
        if passage is None or passage.classroom_id != classroom_id:
            raise PassageNotFound()
        return passage

    async def _checked(self, title: str, text: str) -> int:
        # A pasted passage may be a megabyte: counted off the event loop (the tokenizer lets go of the GIL).
        return await anyio.to_thread.run_sync(self._prompts.check_passage, title, text)

    def _activated(self, passage: Passage) -> None:
        if self._warmup is not None:
            self._warmup.passage_activated(passage)
