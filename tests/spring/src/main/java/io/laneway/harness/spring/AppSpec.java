package io.laneway.harness.spring;

/**
 * One application of the harness: a service ({@code NAME@IP:PORT[,next=SERVICE]}) or the gateway
 * ({@code [NAME@]IP:PORT}, named {@value #GATEWAY} unless given a name).
 */
final class AppSpec {
    static final String GATEWAY = "gateway";

    final boolean gateway;
    final String name;
    final String ip;
    final int port;
    /** The service a service calls from its {@code /hop}, or {@code null}. */
    final String next;
    /**
     * The {@code laneway.lanes} the service registers itself with (the common recipe: a tag read
     * from the environment at start-up), comma-separated, or {@code null}.
     */
    final String lanes;
    /** The Kubernetes pod it stands for ({@code laneway.pod-name} in probe hop records), or {@code null}. */
    final String pod;

    private AppSpec(boolean gateway, String name, String ip, int port, String next, String lanes, String pod) {
        this.gateway = gateway;
        this.name = name;
        this.ip = ip;
        this.port = port;
        this.next = next;
        this.lanes = lanes;
        this.pod = pod;
    }

    /** {@code NAME@IP:PORT[,next=SERVICE][,lanes=LANE[+LANE...]][,pod=POD]} */
    static AppSpec service(String spec) {
        String[] parts = spec.split(",");
        String next = null;
        String lanes = null;
        String pod = null;
        for (int i = 1; i < parts.length; i++) {
            String option = parts[i].trim();
            if (option.startsWith("next=") && option.length() > 5) {
                next = option.substring(5);
            } else if (option.startsWith("lanes=") && option.length() > 6) {
                lanes = option.substring(6).replace('+', ',');
            } else if (option.startsWith("pod=") && option.length() > 4) {
                pod = option.substring(4);
            } else {
                throw new IllegalArgumentException("unknown option '" + option + "' in --service " + spec);
            }
        }
        int at = parts[0].indexOf('@');
        if (at <= 0) {
            throw new IllegalArgumentException("--service wants NAME@IP:PORT[,next=SERVICE], not " + spec);
        }
        String name = parts[0].substring(0, at).trim();
        String[] address = address(parts[0].substring(at + 1).trim(), spec);
        return new AppSpec(false, name, address[0], Integer.parseInt(address[1]), next, lanes, pod);
    }

    /** {@code [NAME@]IP:PORT} */
    static AppSpec gateway(String spec) {
        int at = spec.indexOf('@');
        String name = at > 0 ? spec.substring(0, at).trim() : GATEWAY;
        String[] address = address(spec.substring(at + 1).trim(), spec);
        return new AppSpec(true, name, address[0], Integer.parseInt(address[1]), null, null, null);
    }

    private static String[] address(String hostPort, String spec) {
        int colon = hostPort.lastIndexOf(':');
        if (colon <= 0 || colon == hostPort.length() - 1) {
            throw new IllegalArgumentException("want IP:PORT in " + spec);
        }
        String port = hostPort.substring(colon + 1);
        int p = Integer.parseInt(port);
        if (p <= 0 || p > 65535) {
            throw new IllegalArgumentException("bad port in " + spec);
        }
        return new String[] {hostPort.substring(0, colon), port};
    }

    /** {@code NAME@IP:PORT}: what {@code stop} and {@code start} name an application by. */
    String key() {
        return name + "@" + address();
    }

    String address() {
        return ip + ":" + port;
    }
}
