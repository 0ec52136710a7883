package io.laneway.lane;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.concurrent.Callable;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The lane of the request being served on this thread: a Kubernetes label value such as
 * {@code dev-alice} or {@code gray}; {@code null} means baseline.
 *
 * <p>Integrations (the servlet filter, the Dubbo provider filter) {@link #set} it for the
 * duration of a request and {@link #restore} the previous value afterwards; outgoing calls read
 * {@link #effective()}. Work handed to another thread keeps its lane through {@link #wrap}.
 */
public final class Lane {
    static final Logger LOG = Logger.getLogger("io.laneway.lane");

    private static final int MAX_LENGTH = 63;

    // set(null) rather than remove(): a thread keeps its map entry, so serving the next request
    // allocates nothing
    private static final ThreadLocal<String> CURRENT = new ThreadLocal<>();

    private static final LaneSource[] SOURCES = loadSources();

    // whether an integration serves a request on this thread, whatever its lane
    private static final ThreadLocal<Boolean> SERVING = new ThreadLocal<>();

    private Lane() {}

    /**
     * The lane of the request being served on this thread, else the lane an installed
     * {@link LaneSource} finds in a framework's own context (Dubbo's async server context), else
     * {@code null}.
     */
    public static String current() {
        String lane = CURRENT.get();
        if (lane != null) {
            return lane;
        }
        for (LaneSource source : SOURCES) {
            lane = source.lane();
            if (lane != null) {
                return lane;
            }
        }
        return null;
    }

    /**
     * Makes {@code lane} this thread's lane ({@code null} clears it) and returns the previous
     * value, to be given to {@link #restore} in a {@code finally} block.
     */
    public static String set(String lane) {
        String previous = CURRENT.get();
        if (previous != lane) {
            CURRENT.set(lane);
        }
        return previous;
    }

    /**
     * Whether this thread serves a request (an integration's filter runs around it), in a lane or
     * in none. A call made while serving belongs to that request, which was routed already: it is
     * never drawn into a lane at an RPC entry ({@link EntryRules}).
     */
    public static boolean serving() {
        return SERVING.get() == Boolean.TRUE;
    }

    /**
     * Marks this thread as serving a request, or not, and returns the previous mark, to be given
     * back in a {@code finally} block. For integrations, beside {@link #set}.
     */
    public static boolean serving(boolean serving) {
        boolean previous = SERVING.get() == Boolean.TRUE;
        if (previous != serving) {
            SERVING.set(serving);
        }
        return previous;
    }

    /** Puts back the value that {@link #set} returned. */
    public static void restore(String previous) {
        if (CURRENT.get() != previous) {
            CURRENT.set(previous);
        }
    }

    /**
     * The lane an outgoing call should carry: the served request's lane ({@link #current()}),
     * else this instance's own lane ({@link OwnLane#get()}), else {@code null} (baseline).
     */
    public static String effective() {
        String lane = current();
        return lane != null ? lane : OwnLane.get();
    }

    /**
     * Whether {@code value} can be a lane: a non-empty Kubernetes label value (at most 63
     * characters of {@code [-A-Za-z0-9_.]}, beginning and ending with a letter or digit).
     */
    public static boolean isValid(CharSequence value) {
        if (value == null) {
            return false;
        }
        int n = value.length();
        if (n == 0 || n > MAX_LENGTH) {
            return false;
        }
        if (!isAlphanumeric(value.charAt(0)) || !isAlphanumeric(value.charAt(n - 1))) {
            return false;
        }
        for (int i = 1; i < n - 1; i++) {
            char c = value.charAt(i);
            if (!isAlphanumeric(c) && c != '-' && c != '_' && c != '.') {
                return false;
            }
        }
        return true;
    }

    /** {@code value} if it {@link #isValid is a valid lane}, else {@code null}. */
    public static String validOrNull(String value) {
        return isValid(value) ? value : null;
    }

    /** {@code task}, run with the lane that is current now (on the calling thread). */
    public static Runnable wrap(Runnable task) {
        String lane = current();
        return () -> {
            String previous = set(lane);
            try {
                task.run();
            } finally {
                restore(previous);
            }
        };
    }

    /** {@code task}, run with the lane that is current now (on the calling thread). */
    public static <T> Callable<T> wrap(Callable<T> task) {
        String lane = current();
        return () -> {
            String previous = set(lane);
            try {
                return task.call();
            } finally {
                restore(previous);
            }
        };
    }

    /** An executor that runs each task with the lane current where the task was handed over. */
    public static Executor wrap(Executor executor) {
        if (executor instanceof LaneExecutorService) {
            return executor;
        }
        if (executor instanceof ExecutorService) {
            return new LaneExecutorService((ExecutorService) executor);
        }
        return task -> executor.execute(wrap(task));
    }

    /** An executor service that runs each task with the lane current where it was submitted. */
    public static ExecutorService wrap(ExecutorService executor) {
        return executor instanceof LaneExecutorService ? executor : new LaneExecutorService(executor);
    }

    static <T> List<Callable<T>> wrapAll(Collection<? extends Callable<T>> tasks) {
        List<Callable<T>> wrapped = new ArrayList<>(tasks.size());
        for (Callable<T> task : tasks) {
            wrapped.add(wrap(task));
        }
        return wrapped;
    }

    private static boolean isAlphanumeric(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    }

    // a source whose framework is missing from the class path must not take the rest down
    private static LaneSource[] loadSources() {
        List<LaneSource> sources = new ArrayList<>();
        try {
            Iterator<LaneSource> it = ServiceLoader.load(LaneSource.class, Lane.class.getClassLoader()).iterator();
            // bounded: a broken provider file must not spin here
            for (int i = 0; i < 64; i++) {
                try {
                    if (!it.hasNext()) {
                        break;
                    }
                    sources.add(it.next());
                } catch (ServiceConfigurationError | LinkageError e) {
                    LOG.log(Level.FINE, "laneway: skipping a lane source that cannot load", e);
                }
            }
        } catch (ServiceConfigurationError | LinkageError e) {
            LOG.log(Level.FINE, "laneway: no lane sources", e);
        }
        return sources.toArray(new LaneSource[0]);
    }
}
