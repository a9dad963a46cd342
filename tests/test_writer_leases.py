"""The writers' heartbeat on a real Redis: an answer's lease, renewed by the process that writes it, keeps it
from the sweeper and holds its pupil's one-at-a-time claim; one no process renews lapses, and its pupil may
ask again (`Store.renew_leases`, `LiveAnswers`, `AbandonedAnswers`)."""

import asyncio
import time

from service.classroom.abandoned import ABANDONED, AbandonedAnswers
from service.records import QuestionStatus
from service.store import Keys, open_store
from tests.helpers import admitted
from tests.servers import own_database_url


async def _leases(redis_url: str) -> None:
    async with open_store(own_database_url(redis_url)) as store:
        redis = store.redis
        ada, ben, cy, dee = await admitted(store, ["Ada", "Ben", "Cy", "Dee"], lease_s=3)
        claim = Keys.pupil_answering
        # Admitted: the claim lasts a lease, and so does the answer's place among those being written.
        assert 0 < await redis.ttl(claim(ada.pupil_id)) <= 3
        assert (await redis.zscore(Keys.answering(), ada.id) or 0) <= time.time() + 3

        # Ben's answer ends; Cy asked again on another process (his claim now names another question).
        await store.finish_question(ben.model_copy(update={"status": QuestionStatus.ANSWERED, "answer": "Bees."}))
        await redis.set(claim(cy.pupil_id), "another question", ex=3)
        renewed = await store.renew_leases([(q.id, q.pupil_id) for q in (ada, ben, cy)], lease_s=60)
        assert renewed == 2  # Ada's and Cy's first are still being written; Ben's ended
        assert await redis.ttl(claim(ada.pupil_id)) > 50
        assert await redis.ttl(claim(cy.pupil_id)) <= 3, "a claim of another question was renewed"
        assert not await redis.exists(claim(ben.pupil_id)), "an ended answer's claim came back"
        assert await redis.zscore(Keys.answering(), ben.id) is None, "an ended answer is being written again"
        assert (await redis.zscore(Keys.answering(), ada.id) or 0) > time.time() + 50

        # Dee's writer died (nothing renews hers): her lease lapses, the sweeper stores her answer cut short,
        # and her claim is gone; the renewed ones are left alone.
        sweeper = AbandonedAnswers(store, lease_s=3)
        assert sweeper.every_s == 1.0
        assert await sweeper.sweep(time.time() + 4) == 1
        ada_now, dee_now = await store.get_question(ada.id), await store.get_question(dee.id)
        assert ada_now is not None and dee_now is not None
        assert (dee_now.status, dee_now.error) == (QuestionStatus.INCOMPLETE, ABANDONED)
        assert ada_now.status == QuestionStatus.ANSWERING
        await asyncio.sleep(3.1)
        assert not await redis.exists(claim(dee.pupil_id)), "a lapsed lease still holds its pupil's claim"
        assert await store.renew_leases([], lease_s=60) == 0


def test_a_renewed_lease_keeps_an_answer_and_its_claim_and_a_lapsed_one_is_swept(redis_url: str) -> None:
    asyncio.run(_leases(redis_url))
