"""Every Redis key the service uses, named here and nowhere else; values are JSON of the models in `records`.

Keys:
    teacher:{id}                          Teacher
    teacher-email:{email}                 teacher id
    teacher:{id}:classrooms               sorted set of classroom ids, by time created
    session:teacher:{sha256(token)}       teacher id, expiring
    session:pupil:{sha256(token)}         PupilSession, expiring
    failed:{kind}:{client}                how many join or sign-in attempts of a client failed in its window
    cls:{id}                              Classroom
    joincode:{code}                       classroom id
    cls:{id}:passages                     list of passage ids, oldest first
    cls:{id}:passages:former              list of the ids of passages edited or deleted: out of the class's
                                          list, still stored for the questions asked about them
    cls:{id}:active_passage               passage id that pupils ask about
    cls:{id}:version                      bumped by every write to the class, its passages or its active one
    classes:changed                       pub/sub channel: the id of a class whose version was just bumped
    passage:{id}                          Passage
    q:{id}                                QuestionRecord (while answering, with the text so far: answer.progress_s)
    q:{id}:stop                           set, for a while, when the pupil stops the answer (its writer checks)
    answers:stop                          pub/sub channel: the id of a question whose pupil stopped its answer
    cls:{id}:questions                    sorted set of question ids, by time asked (also below)
    cls:{id}:questions:pupil:{name}       the same, for one display name (lower case): its first pupil's
    cls:{id}:questions:pupil#{n}:{name}   the same, for the n-th pupil (n > 1) who joined with that name
    cls:{id}:pupil_numbers                hash: display name (lower case) -> how many pupils joined with it
    cls:{id}:pupils                       hash: "{n}:{name in lower case}" -> the name as that pupil typed it
    passage:{id}:questions                the same, for one passage
    pupil:{id}:questions                  the same, for one pupil session: their own history
    pupil:{id}:answering                  the question id whose answer streams (one at a time), expiring with
                                          its writer's lease
    pupil:{id}:asked                      when the pupil's last questions were admitted (the rate limit)
    cls:{id}:events                       pub/sub channel: questions asked and answered, for the teacher
    classrooms                            set of every classroom id (for warming active passages)
    questions:recent                      sorted set of question ids of the last day, by time (operators' figures)
    questions:answering                   sorted set of the question ids whose answer is being written, by
                                          when their writer's lease lapses
    tallies:{hour}                        hash: the operators' figures of the questions asked in the hour (its
                                          start, epoch s), a field a scope and figure (store/stats.py): the hour's
                                          per replica and class; kept until a day after the hour, as are the next
                                          three
    tallies:{ten}:ten                     hash: the same for ten minutes (from {ten}), per replica and class
    tallies:{minute}:minute               hash: the same for a minute
    tallies:{hour}:series                 hash: the hour's per minute and variant
    tmp:{id}                              a list's question ids, for the one transaction that reads them
    retention:sweep                       set, for one round, by the process that archives questions past retention
    backends:config                       BackendConfig: variants, replicas, active variant, canary
    passage:{id}:warmed                   replica URLs where the passage was last sent ahead of pupils
    warmup:fleet:{digest}                 set, briefly, by the process that re-warms for one state of the fleet
    warmup:burst:{digest}                 set, for one run of a replica: the process that set it sends its warm-up burst
    warmup:bursts                         hash: replica URL -> WarmupBurst, how its last burst went (the console's)
    fleet:prober                          the id of the one service process that probes the replicas, expiring (a lease)
    fleet:probes                          SharedProbes: what its last round of probes found, for every process
    turns:{replica}:running               sorted set of the question ids running on a replica, by when their turn lapses
    turns:{replica}:classes               list of the classroom ids with questions waiting: whose turn is next
    turns:{replica}:waiting:{classroom}   list of one class's question ids waiting, first come first
    turns:granted                         pub/sub channel: the id of a question whose turn has come
    turns:none:running, :classes          stand-ins for a line's keys where a question takes no turn (left alone)
"""

from service.store.ids import digest


class Keys:
    @staticmethod
    def teacher(teacher_id: str) -> str:
        return f"teacher:{teacher_id}"

    @staticmethod
    def teacher_email(email: str) -> str:
        return f"teacher-email:{email.lower()}"

    @staticmethod
    def teacher_classrooms(teacher_id: str) -> str:
        return f"teacher:{teacher_id}:classrooms"

    @staticmethod
    def teacher_session(token: str) -> str:
        return f"session:teacher:{digest(token)}"

    @staticmethod
    def pupil_session(token: str) -> str:
        return f"session:pupil:{digest(token)}"

    @staticmethod
    def classroom(classroom_id: str) -> str:
        return f"cls:{classroom_id}"

    @staticmethod
    def join_code(code: str) -> str:
        return f"joincode:{code}"

    @staticmethod
    def failed_attempts(kind: str, client: str) -> str:
        return f"failed:{kind}:{client}"

    @staticmethod
    def passages(classroom_id: str) -> str:
        return f"cls:{classroom_id}:passages"

    @staticmethod
    def former_passages(classroom_id: str) -> str:
        return f"cls:{classroom_id}:passages:former"

    @staticmethod
    def active_passage(classroom_id: str) -> str:
        return f"cls:{classroom_id}:active_passage"

    @staticmethod
    def class_version(classroom_id: str) -> str:
        return f"cls:{classroom_id}:version"

    @staticmethod
    def classes_changed() -> str:
        return "classes:changed"

    @staticmethod
    def passage(passage_id: str) -> str:
        return f"passage:{passage_id}"

    @staticmethod
    def question(question_id: str) -> str:
        return f"q:{question_id}"

    @staticmethod
    def answer_stop(question_id: str) -> str:
        return f"q:{question_id}:stop"

    @staticmethod
    def answer_stops() -> str:
        return "answers:stop"

    @staticmethod
    def questions(classroom_id: str) -> str:
        return f"cls:{classroom_id}:questions"

    @staticmethod
    def questions_by_name(classroom_id: str, pupil_name: str, number: int = 1) -> str:
        """The first pupil of a name keeps the key that names had before pupils were numbered."""
        who = "pupil" if number <= 1 else f"pupil#{number}"
        return f"cls:{classroom_id}:questions:{who}:{pupil_name.strip().lower()}"

    @staticmethod
    def pupil_numbers(classroom_id: str) -> str:
        return f"cls:{classroom_id}:pupil_numbers"

    @staticmethod
    def pupils(classroom_id: str) -> str:
        return f"cls:{classroom_id}:pupils"

    @staticmethod
    def passage_questions(passage_id: str) -> str:
        return f"passage:{passage_id}:questions"

    @staticmethod
    def pupil_questions(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:questions"

    @staticmethod
    def pupil_answering(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:answering"

    @staticmethod
    def pupil_asked(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:asked"

    @staticmethod
    def events(classroom_id: str) -> str:
        return f"cls:{classroom_id}:events"

    @staticmethod
    def classrooms() -> str:
        return "classrooms"

    @staticmethod
    def recent_questions() -> str:
        return "questions:recent"

    @staticmethod
    def answering() -> str:
        """Questions whose answer is being written, by when their writer's lease lapses (renewed by its
        process every third of `answer.writer_lease_s`): one still there after that was abandoned by a process
        that died, or that could not store its end."""
        return "questions:answering"

    @staticmethod
    def stats(hour: int) -> str:
        """The operators' figures of the questions asked in the hour that starts at `hour` (epoch s)."""
        return f"tallies:{hour}"

    @staticmethod
    def stats_ten(ten: int) -> str:
        """The same figures, of the ten minutes that start at `ten` (epoch s)."""
        return f"tallies:{ten}:ten"

    @staticmethod
    def stats_minute(minute: int) -> str:
        return f"tallies:{minute}:minute"

    @staticmethod
    def stats_series(hour: int) -> str:
        """The hour's figures a minute and variant, for the operators' charts."""
        return f"tallies:{hour}:series"

    @staticmethod
    def warmed(passage_id: str) -> str:
        return f"passage:{passage_id}:warmed"

    @staticmethod
    def burst_outcomes() -> str:
        return "warmup:bursts"

    @staticmethod
    def fleet_warmup(fleet_state: str) -> str:
        return f"warmup:fleet:{digest(fleet_state)}"

    @staticmethod
    def replica_burst(claim: str) -> str:
        """A warm-up burst claimed for one run of a replica (its URL and start time)."""
        return f"warmup:burst:{digest(claim)}"

    @staticmethod
    def backend_config() -> str:
        return "backends:config"

    @staticmethod
    def prober() -> str:
        return "fleet:prober"

    @staticmethod
    def probes() -> str:
        return "fleet:probes"

    @staticmethod
    def turns_running(replica: str) -> str:
        return f"turns:{replica}:running"

    @staticmethod
    def turns_classes(replica: str) -> str:
        return f"turns:{replica}:classes"

    @staticmethod
    def turns_waiting_prefix(replica: str) -> str:
        """The key of a class's line is this and the classroom id (known to the scripts as an argument)."""
        return f"turns:{replica}:waiting:"

    @staticmethod
    def turns_granted() -> str:
        return "turns:granted"

    @staticmethod
    def no_turns() -> list[str]:
        """Stand-ins for a line's two keys (`TurnLine.keys`) where a question takes no turn: the scripts
        leave them alone."""
        return ["turns:none:running", "turns:none:classes"]

    @staticmethod
    def retention_sweep() -> str:
        return "retention:sweep"

    @staticmethod
    def scratch(name: str) -> str:
        return f"tmp:{name}"
